"""The conformance suite in pytest, for your own repository: one test per check, on the plugin's testbeds.

    # tests/test_my_epp_conforms.py
    from eppkit.conformance.testing import conformance_tests

    test_my_epp = conformance_tests()   # the EPP of --eppkit-epp-command / --eppkit-epp-address

    # tests/test_my_filter_conforms.py: your filter judged as a plugin (eppkit conformance --plugin)
    from eppkit import LuaFilter
    from eppkit.conformance.testing import plugin_conformance_tests

    test_my_filter = plugin_conformance_tests(LuaFilter(path="my_guard.lua"), let_through=("x-tenant: acme",))

``conformance_tests(mode=..., options=..., shed_header=..., checks=..., cache_aware=..., load_aware=...,
lora_affinity=..., saturation=..., pd=..., flow_control=..., quick=...)`` takes what ``eppkit conformance`` takes. Each
check is one test (id = the check's): a pass passes, a failed *must* fails with the evidence, a failed *should*
passes with a warning (``strict=True``: fails), a check that does not apply or could not be judged is skipped with
why. The testbeds are the plugin's shared ones (``eppkit_shared_testbed_factory``): one per variant and module, on
every ``--eppkit-runtime``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import pytest

from eppkit.conformance.budget import Budget, CostBudget
from eppkit.conformance.harness import Harness
from eppkit.conformance.registry import CHECKS, PLUGIN_CHECKS
from eppkit.conformance.results import FAIL, MUST, PASS, Result
from eppkit.conformance.schedule import Scheduler
from eppkit.conformance.subject import PLUGIN
from eppkit.conformance.suite import selected
from eppkit.conformance.target import FLOW_CONTROL_TTL_S, REQUEST_TIMEOUT_S, PluginTarget, Target
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
                      quick: bool = False, load_aware: bool = False, lora_affinity: bool = False,
                      saturation: bool = False, pd: bool = False, flow_control: bool = False,
                      flow_control_ttl: float = FLOW_CONTROL_TTL_S, flow_control_drop_status: int = 429,
                      request_timeout_s: float = REQUEST_TIMEOUT_S, strict: bool = False, budget: str = "") -> Callable:
    """A test function, parametrized over the checks, judging the EPP of ``mode`` (and ``options``); ``quick``:
    the soak (sustained-load) skipped, as ``--quick``."""
    target = Target(mode=mode, options=dict(options or {}), shed_header=shed_header, cache_aware=cache_aware,
                    load_aware=load_aware, lora_affinity=lora_affinity, saturation=saturation, pd=pd,
                    flow_control=flow_control, flow_control_ttl=flow_control_ttl,
                    flow_control_drop_status=flow_control_drop_status)
    # A check the EPP does not take on (kv-cache-affinity without cache_aware) is no test here, not a skipped one.
    names = [c.name for c in selected(checks) if c.not_declared(target) is None]
    results: dict[str, dict[str, Result]] = {}  # runtime -> check -> result: a check's needs, per runtime
    concurrent: dict[str, bool] = {}  # runtime -> the EPP serves streams at once (Harness.probe_concurrency)

    @pytest.mark.e2e
    @pytest.mark.parametrize("conformance_check", names)
    def test_conformance(conformance_check: str, eppkit_shared_testbed_factory, eppkit_runtime: str) -> None:
        harness = Harness(target, eppkit_shared_testbed_factory, request_timeout_s=request_timeout_s,
                          budget=Budget.parse(budget) if budget else None, quick=quick)
        done = results.setdefault(eppkit_runtime, {})
        if concurrent.get(eppkit_runtime) is None:  # once per runtime: does this EPP serve streams at once?
            concurrent[eppkit_runtime] = harness.probe_concurrency()
        harness.concurrent = concurrent[eppkit_runtime]
        check = CHECKS.get(conformance_check)
        outcome(Scheduler(harness, done).judge(check), check.level, strict)

    return test_conformance


def plugin_conformance_tests(*filters: Any, mode: str = "direct", options: dict[str, Any] | None = None,
                             let_through: Iterable[str] = (), rewrites: Iterable[str] = (), checks: Iterable[str] = (),
                             request_timeout_s: float = REQUEST_TIMEOUT_S, strict: bool = False,
                             budget: str = "") -> Callable:
    """A test function, parametrized over the plugin checks, judging ``filters`` (LuaFilter, DynamicModule,
    HttpFilter: what ``--lua-filter``, ``--dynamic-module`` and ``--http-filter`` name) as ``eppkit conformance
    --plugin`` does: each check against the floor, the same testbed without them (``let_through``: the headers a
    gate lets through, as ``--plugin-let-through``; ``rewrites``: as ``--plugin-rewrites``; ``budget``: as
    ``--budget`` for the plugin's cost, e.g. ``"p50=2ms"``)."""
    target = PluginTarget(filters=filters, mode=mode, options=dict(options or {}), let_through=tuple(let_through),
                          rewrites=frozenset(rewrites)).validate()
    names = [c.name for c in selected(checks, kind=PLUGIN) if c.not_declared(target) is None]
    results: dict[str, dict[str, Result]] = {}  # runtime -> check -> result

    @pytest.mark.e2e
    @pytest.mark.parametrize("plugin_check", names)
    def test_plugin_conformance(plugin_check: str, eppkit_shared_testbed_factory, eppkit_runtime: str) -> None:
        harness = Harness(target, eppkit_shared_testbed_factory, request_timeout_s=request_timeout_s,
                          budget=CostBudget.parse(budget) if budget else None)
        check = PLUGIN_CHECKS.get(plugin_check)
        outcome(Scheduler(harness, results.setdefault(eppkit_runtime, {})).judge(check), check.level, strict)

    return test_plugin_conformance
