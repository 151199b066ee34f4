"""The conformance suite in pytest, for your own repository: one test per check, on the plugin's testbeds.

    # tests/test_my_epp_conforms.py
    from eppkit.conformance.testing import conformance_tests

    test_my_epp = conformance_tests()   # the EPP of --eppkit-epp-command / --eppkit-epp-address

``conformance_tests(mode=..., options=..., shed_header=..., checks=..., cache_aware=...)`` takes what ``eppkit conformance``
takes. Each check is one test (id = the check's): a pass passes, a failed *must* fails with the evidence, a failed
*should* passes with a warning (``strict=True``: fails), a check that does not apply or could not be judged is
skipped with why. The testbeds are the plugin's shared ones
(``eppkit_shared_testbed_factory``): one per variant and module, on every ``--eppkit-runtime``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import pytest

from eppkit.conformance.checks import CHECKS, Result
from eppkit.conformance.checks.latency import Budget
from eppkit.conformance.checks.registry import FAIL, MUST, PASS
from eppkit.conformance.harness import Harness
from eppkit.conformance.suite import run_check, selected
from eppkit.conformance.target import REQUEST_TIMEOUT_S, Target
from eppkit.modes import external_epp


def outcome(result: Result, level: str = MUST, strict: bool = False) -> None:
    """A check's result as a pytest outcome: a failed *must* fails, a failed *should* is a warning (with
    ``strict``, a failure), n/a and not run skip with why."""
    if result.status == PASS:
        return
    text = f"{result.status}: {result.message}" + "".join(f"\n  {line}" for line in result.evidence)
    if result.status == FAIL and (level == MUST or strict):
        pytest.fail(text, pytrace=False)
    if result.status == FAIL:
        warnings.warn(pytest.PytestWarning(f"conformance (should): {text}"), stacklevel=2)
        return
    pytest.skip(text)


def conformance_tests(mode: str = external_epp.MODE.name, options: dict[str, Any] | None = None, *,
                      shed_header: str | None = None, checks: Iterable[str] = (), cache_aware: bool = False,
                      sustained: bool = False,
                      request_timeout_s: float = REQUEST_TIMEOUT_S, strict: bool = False, budget: str = "") -> Callable:
    """A test function, parametrized over the checks, judging the EPP of ``mode`` (and ``options``)."""
    target = Target(mode=mode, options=dict(options or {}), shed_header=shed_header, cache_aware=cache_aware,
                    sustained=sustained)
    # A check the EPP does not take on (kv-cache-affinity without cache_aware) is no test here, not a skipped one.
    names = [c.name for c in selected(checks) if c.not_declared(target) is None]
    results: dict[str, dict[str, Result]] = {}  # runtime -> check -> result: a check's needs, per runtime
    concurrent: dict[str, bool] = {}  # runtime -> the EPP serves streams at once (Harness.probe_concurrency)

    @pytest.mark.e2e
    @pytest.mark.parametrize("conformance_check", names)
    def test_conformance(conformance_check: str, eppkit_shared_testbed_factory, eppkit_runtime: str) -> None:
        harness = Harness(target, eppkit_shared_testbed_factory, request_timeout_s=request_timeout_s,
                          budget=Budget.parse(budget) if budget else None)
        done = results.setdefault(eppkit_runtime, {})
        if concurrent.get(eppkit_runtime) is None:  # once per runtime: does this EPP serve streams at once?
            concurrent[eppkit_runtime] = harness.probe_concurrency()
        harness.concurrent = concurrent[eppkit_runtime]
        check = CHECKS.get(conformance_check)
        done[conformance_check] = run_check(check, harness, done)
        outcome(done[conformance_check], check.level, strict)

    return test_conformance
