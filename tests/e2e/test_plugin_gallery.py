"""Each plugin check is proven by a gallery filter that breaks its rule (eppkit.conformance.gallery: Lua filters and
a Go dynamic module's filters): the plugin verdict fails exactly that filter's check under both client protocols, in
Envoy's words, and every other check passes; the gallery's no-op filter conforms. The plugin's testbed and its floor
start once per verdict."""

from __future__ import annotations

import pytest

from eppkit.conformance import report as rp
from eppkit.conformance.checks.latency import CostBudget
from eppkit.conformance.checks.registry import PLUGIN_CHECKS
from eppkit.conformance.gallery import GALLERY, plugin
from eppkit.conformance.subject import PLUGIN
from eppkit.conformance.suite import run, selected
from eppkit.conformance.target import PluginTarget
from tests.support.verdicts import local_beds

pytestmark = pytest.mark.e2e

# gallery filter -> the checks it fails (every other check passes), and words (Envoy's, or the figures) its failure
# message must use
CAUGHT_BY = {
    "noop": (set(), ""),
    "reads_whole_response": ({"streaming-preserved"}, "time to first token"),
    "corrupts_body": ({"bodies-byte-for-byte"}, "16385 B whole request body reached the backend changed"),
    "errors_without_header": ({"no-script-errors"}, "script log: [string"),
    "refuses_in_plain_text": ({"refusals-are-clean"}, "HTTP 403 with plain text 'forbidden: no x-tenant'"),
    "errors_on_odd_json": ({"hostile-input-survives"}, "script errors on a body that is not JSON"),
    "burns_cpu": ({"cost-within-budget"}, "p50"),
    "leaks_per_request": ({"memory-bounded"}, "KiB a request"),
    "holds_trailers": ({"bodies-byte-for-byte"}, "with request trailers request did not reach the backend"),
    "leaks_go_heap": ({"memory-bounded"}, "KiB a request"),
    "panics_on_cancel": ({"streams-served"}, "panic: runtime error: invalid memory address or nil pointer"),
    "logs_error_without_header": ({"no-module-errors"}, "logs_error_without_header: no x-tenant on "),
}
# The protocols a filter's failure shows in, where not both: request trailers are sent on h2c only (Envoy's HTTP/1.1
# codec drops them).
ONLY_IN = {"holds_trailers": {"h2c"}}
# What a user tells the verdict about a gallery filter, as they would on the command line (--plugin-let-through).
# What a user would tell the verdict of a gate (the header it lets through). errors_without_header's requests with
# it are served as they should be (no script error, no error's cost in a stream's pace); the verdict's requests
# without it (refusals-are-clean's) raise its errors, which no-script-errors counts over the whole verdict (and
# logs_error_without_header's error lines, which no-module-errors counts).
TOLD = {name: {"let_through": ("x-tenant: acme",)}
        for name in ("refuses_in_plain_text", "errors_without_header", "logs_error_without_header")}
# What each failure's evidence must hold in Envoy's own words.
ENVOY_SAYS = {
    "streaming-preserved": "Envoy's access log",
    "bodies-byte-for-byte": "backend received",
    "no-script-errors": "[error][lua]",
    "no-module-errors": "[error][dynamic_modules]",
    "refusals-are-clean": '"details": "lua_response"',
    "hostile-input-survives": "[error][lua]",
    "cost-within-budget": "Envoy's access log",
    "memory-bounded": "VmRSS",
    "streams-served": "Envoy's access log",
}


def test_every_gallery_filter_has_its_checks():
    assert set(CAUGHT_BY) == set(GALLERY)
    assert set().union(*(checks for checks, _ in CAUGHT_BY.values())) == set(PLUGIN_CHECKS.names())


@pytest.fixture(scope="module")
def make_bed():
    """Local testbeds sharing one Jaeger, each stopped after its verdict."""
    with local_beds("jaeger-plugin-gallery") as made:
        yield made


# The suite's other tests load the machine (load 8-14 on 2 cores): a filter that reads every request body
# (errors_on_odd_json, as a prompt guard does) then costs a chat about 1 ms, the default p50 budget; burns_cpu's
# 2 ms of CPU a request is over this one either way.
GALLERY_BUDGET = CostBudget(p50_ms=1.5)


def judge(make_bed, name: str, checks: list[str] | None = None, **target) -> dict:
    make, beds = make_bed
    try:
        return run(PluginTarget(filters=(plugin(name),), **target), make, runtime="local", budget=GALLERY_BUDGET,
                   checks=None if checks is None else selected(checks, kind=PLUGIN))
    finally:
        while beds:
            beds.pop().stop()


# The verdict times a stream's pace and a chat's cost against the floor's (its timed checks): with the suite's other
# tests beside it (load 14 on 2 cores) the median of five streams moved 6 ms through a filter that does nothing to
# them (two whole-suite runs, 2026-11-29). So the timed checks are judged alone, as the EPP verdict's timing tests
# run, on the filters that prove them: the no-op one (they pass) and those whose fault they catch. Every other filter
# is judged on every other check beside the suite's other tests (its fault is not one of time: alone, its timed
# checks passed as the no-op's do), and the whole suite is not held up for it.
ALONE = "a stream's pace within 5 ms of the floor's, a chat's cost within 1.5 ms"


TIMED = {c.name for c in PLUGIN_CHECKS.all() if c.timed}
TIMED_BY = {name for name, (checks, _) in CAUGHT_BY.items() if not checks or checks & TIMED}  # judged whole, alone
UNTIMED = [c.name for c in PLUGIN_CHECKS.all() if not c.timed]


def test_each_timed_check_has_a_filter_judged_alone_that_fails_it():
    assert TIMED and all(any(c in CAUGHT_BY[name][0] for name in TIMED_BY) for c in TIMED)
    assert "noop" in TIMED_BY and len(TIMED_BY) < len(CAUGHT_BY)


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.eppkit_alone(ALONE)) if name in TIMED_BY
                                  else name for name in sorted(CAUGHT_BY)])
def test_a_gallery_filter_fails_exactly_its_own_checks_under_both_client_protocols(make_bed, name):
    checks, words = CAUGHT_BY[name]
    whole = name in TIMED_BY
    report = judge(make_bed, name, **TOLD.get(name, {}), checks=None if whole else UNTIMED)
    assert report["subject"]["kind"] == "plugin" and "epp" not in report, report["subject"]
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    target = PluginTarget(filters=(plugin(name),), **TOLD.get(name, {}))  # a Go filter's Lua errors (and back): n/a
    assert statuses == {c: "fail" if c in checks else "n/a" if PLUGIN_CHECKS.get(c).not_declared(target) else "pass"
                        for c in (PLUGIN_CHECKS.names() if whole else UNTIMED)}, rp.text(report)
    must = any(PLUGIN_CHECKS.get(c).level == "must" for c in checks)  # a failed should is a warning
    assert report["verdict"] == ("does not conform" if must else "conforms, with warnings" if checks and whole
                                 else "conforms" if whole else "no verdict: a partial run"), rp.text(report)
    failed = {c["id"]: c for c in report["checks"] if c["status"] == "fail"}
    for check in checks:
        message, evidence = failed[check]["message"], failed[check]["evidence"]
        assert words in message, message
        if PLUGIN_CHECKS.get(check).per_protocol:
            said = {p for p in ("http/1.1", "h2c") if f"[{p}]" in message} or {"http/1.1", "h2c"}
        else:  # judged once over both protocols' requests: its evidence says so
            said = {p for p in ("http/1.1", "h2c") if any(p in line for line in evidence)}
        assert said == ONLY_IN.get(name, {"http/1.1", "h2c"}), (check, message)
        assert any(ENVOY_SAYS[check] in line for line in evidence), evidence


def test_a_declared_rewrite_is_not_judged(make_bed):
    report = judge(make_bed, "corrupts_body", rewrites={"request"}, checks=["bodies-byte-for-byte"])
    bodies = next(c for c in report["checks"] if c["id"] == "bodies-byte-for-byte")
    assert bodies["status"] == "pass" and "not judged: request" in bodies["message"], bodies


def test_a_plugin_that_does_not_load_in_an_envoy_version_says_so_for_that_version(make_bed):
    """The version matrix: a dynamic module in an Envoy before 1.38 (no modules from a file there) is refused
    before any check runs; that version's verdict says it does not load and why, in the version check's words,
    and the matrix's verdict is that of the versions it loads in."""
    from eppkit.builds import dynmod
    from eppkit.conformance.suite import NOT_LOADED
    from eppkit.gateway import versions as envoy_versions
    from eppkit.gateway.user_filters import DynamicModule
    from eppkit.pytest_plugin.state import require

    old = next((b.version for b in envoy_versions.cached() if not b.at_least("1.38.0")), None)
    require(old is not None, "no Envoy before 1.38 cached: eppkit bootstrap --envoy-version 1.37.0")
    module = dynmod.find()
    require(module is not None, "the kit's dynamic module is not built: eppkit bootstrap")
    make, beds = make_bed
    target = PluginTarget(filters=(DynamicModule(path=module, filter_name="eppkit_callout"),), envoy_version=old)
    try:
        report = run(target, make, runtime="local")
    finally:
        while beds:
            beds.pop().stop()
    assert report["verdict"] == NOT_LOADED and report["versions"]["envoy"] == old, rp.text(report)
    assert all(c["status"] == "not run" and "needs Envoy 1.38.0 or later" in c["message"] for c in report["checks"])
    both = rp.matrix([report, {**report, "verdict": "conforms", "versions": {**report["versions"], "envoy": "1.40.0"}}])
    assert both["verdict"] == "conforms" and both["verdicts"][old] == NOT_LOADED, both["verdicts"]
    assert f"[{old}] does not load: " in rp.text(both)
