"""The conformance suite in pytest, for your own repository: one test per check, on the plugin's testbeds.

    # tests/test_my_epp_conforms.py
    from eppkit.conformance.testing import conformance_tests

    test_my_epp = conformance_tests()   # the EPP of --eppkit-epp-command / --eppkit-epp-address

``conformance_tests(mode=..., options=..., shed_header=..., checks=...)`` takes what ``eppkit conformance``
takes. Each check is one test (id = the check's): a pass passes, a fail fails with the evidence, a check
that does not apply or whose needs failed is skipped with why. The testbeds are the plugin's shared ones
(``eppkit_shared_testbed_factory``): one per variant and module, on every ``--eppkit-runtime``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import pytest

from eppkit.conformance.checks import CHECKS, Result
from eppkit.conformance.checks.registry import FAIL, PASS
from eppkit.conformance.harness import Harness
from eppkit.conformance.suite import run_check, selected
from eppkit.conformance.target import Target
from eppkit.modes import external_epp


def outcome(result: Result) -> None:
    """A check's result as a pytest outcome."""
    if result.status == PASS:
        return
    text = f"{result.status}: {result.message}" + "".join(f"\n  {line}" for line in result.evidence)
    if result.status == FAIL:
        pytest.fail(text, pytrace=False)
    pytest.skip(text)


def conformance_tests(mode: str = external_epp.MODE.name, options: dict[str, Any] | None = None, *,
                      shed_header: str | None = None, checks: Iterable[str] = (),
                      request_timeout_s: float = 8.0) -> Callable:
    """A test function, parametrized over the checks, judging the EPP of ``mode`` (and ``options``)."""
    target = Target(mode=mode, options=dict(options or {}), shed_header=shed_header)
    names = [c.name for c in selected(checks)]
    results: dict[str, dict[str, Result]] = {}  # runtime -> check -> result: a check's needs, per runtime

    @pytest.mark.e2e
    @pytest.mark.parametrize("conformance_check", names)
    def test_conformance(conformance_check: str, eppkit_shared_testbed_factory, eppkit_runtime: str) -> None:
        harness = Harness(target, eppkit_shared_testbed_factory, request_timeout_s=request_timeout_s)
        done = results.setdefault(eppkit_runtime, {})
        done[conformance_check] = run_check(CHECKS.get(conformance_check), harness, done)
        outcome(done[conformance_check])

    return test_conformance
