"""Each conformance check is proven by an EPP that breaks its rule: the echo EPP with ``--misbehave`` commits
one fault, the field's known EPP bugs among them (docs/epp-bugs.md), and the suite fails exactly that fault's
checks under both client protocols (a check that needs them is not run, never failed), with a message a person
can act on and Envoy's own words. The same EPP without a fault conforms (with the one warning every EPP that
streams a trailered body back gets: Envoy's issue). Against an EPP that refuses every stream, no check passes;
a single check run with ``--check`` runs what it needs first and never says "conforms".

The checks' logic is the same whichever runtime hosts the testbeds; these run on the local one (the suite
against the kit's EPPs runs on both: test_conformance_suite.py).
"""

from __future__ import annotations

import sys

import pytest
from eppkit.services.echo_epp import MISBEHAVIOURS

from eppkit.conformance import report as rp
from eppkit.conformance.checks import CHECKS
from eppkit.conformance.checks.latency import Budget
from eppkit.conformance.suite import WARNINGS, run, selected
from eppkit.conformance.target import Target
from tests.support.verdicts import local_beds

pytestmark = pytest.mark.e2e

ECHO = (f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}} "
        "--shed-header x-shed --pod-roles {pod_roles}")
# fault -> the checks that catch it (every other check passes, is n/a, or is not run: never failed), and words the
# first one's failure message must use
CAUGHT_BY = {
    "reply-out-of-order": ({"reply-order"}, "out of order"),  # GAIE #3033
    "buffered-body-mutation": ({"streamed-body-mutations"}, "streamed_response"),
    "empty-body-reply": ({"streamed-body-mutations"}, "streamed_response"),  # GAIE #3028
    "drop-end-of-stream": ({"end-of-stream"}, "end_of_stream"),
    "eos-only-on-empty-chunk": ({"end-of-stream"}, "also when that chunk carries data"),  # under h2c only
    "change-body": ({"bodies-byte-for-byte"}, "The risk: anything keyed on the body's bytes"),  # values kept: a should
    "reencode-json": ({"body-values-kept"}, "$.seed was 9007199254740993, arrived 9007199254740992"),  # GAIE #1126
    # data lost on the way: a must failed with the bytes that arrived (bodies-byte-for-byte is then not run after it)
    "truncate-body": ({"body-values-kept"}, "65,536 of 1,200,000 bytes arrived; values lost"),
    "wait-for-body": ({"request-without-body"}, "end_of_stream"),
    "healthy-but-refusing": ({"serves"}, "refused or dropped the gRPC stream"),
    "unanswered-trailers": ({"trailers"}, "answer request_trailers"),
    "stall-response": ({"response-phases"}, "response body chunk"),
    "destination-mismatch": ({"same-destination"}, "same value"),
    "metadata-on-response": ({"metadata-stable", "same-destination"}, "the metadata to the same value"),  # GAIE #2824
    "framing-headers": ({"framing-headers"}, "transfer-encoding"),  # GAIE #2993, ai-gateway #2391
    "no-health-services": ({"health-services"}, "liveness"),
    "one-stream": ({"concurrent-streams"}, "every stream"),
    "slow-decision": ({"latency-budget"}, "latency budget"),
    "own-trace": ({"trace-context"}, "trace of their own"),
    "stops-after-n": ({"sustained-load"}, "were lost"),
    "leaks-per-stream": ({"sustained-load"}, "memory grew"),
    "slows-per-stream": ({"sustained-load"}, "the EPP slowed down"),
    # judged said --saturation (the echo EPP without a fault sheds nothing: tests/e2e/test_conformance_saturation.py)
    "shed-every-objective": ({"saturation"}, "was shed: a priority of 0 or more is never sheddable"),
    # the subset contract: 503 with an OpenAI-style error for an empty and an ineligible subset
    "empty-subset-ignored": ({"no-endpoint-503"}, "a subset hint naming no pod of the pool: HTTP 200"),
    "non-openai-503": ({"no-endpoint-503"}, "its body is not JSON"),
    # judged said --pd (the echo EPP without a fault disaggregates as llm-d does: it passes)
    "prefill-as-destination": ({"pd-disaggregation"}, "not a decode-capable pod"),
    "decode-as-prefiller": ({"pd-disaggregation"}, "not a prefill-capable pod"),
    # judged said --flow-control (the echo EPP's queue with one fault; without one it passes all four:
    # tests/e2e/test_conformance_flow_control.py); the other three need queued-then-served (not run after no-queue)
    "no-queue": ({"queued-then-served"}, "the EPP shed a request it should queue"),
    "fifo-bands": ({"priority-bands"}, "an eppkit-low request went before an eppkit-high one"),
    "one-flow": ({"fairness"}, "times in a row while the other waited"),
    "ttl-never": ({"ttl-drop"}, "past its TTL of 5 s"),
}
# The suite's other tests load the machine (load 10+ on 2 cores): a latency budget for that (slow-decision's 900 ms
# is over it all the same).
LOADED_MACHINE = Budget(decision_ms=500, release_ms=500)
# Faults whose checks fail under HTTP/2 only: an h2c body ends on a chunk that carries data (HTTP/1.1's ends on an
# empty one), and only h2c carries request trailers (Envoy drops HTTP/1.1's).
H2C_ONLY = {"eos-only-on-empty-chunk", "unanswered-trailers"}


def test_every_fault_the_echo_epp_can_commit_has_its_check():
    assert set(CAUGHT_BY) == set(MISBEHAVIOURS) - {"none"}


@pytest.fixture(scope="module")
def make_bed():
    """Local testbeds sharing one Jaeger, each stopped after its test."""
    with local_beds("jaeger-conformance-fixtures") as made:
        yield made


# Held under sustained load (the soak, its 2,000 requests): the EPP without a fault and the faults it catches; the
# other faults' verdicts are quick (--quick: the soak is left out, the verdict says so).
SUSTAINED = {"none"} | {fault for fault, (checks, _) in CAUGHT_BY.items() if "sustained-load" in checks}
# Said to shed by priority (--saturation): the faults saturation catches.
SATURATION = {fault for fault, (checks, _) in CAUGHT_BY.items() if "saturation" in checks}
# Said to disaggregate prefill and decode (--pd): the EPP without a fault (it passes) and the faults pd catches.
PD = {"none"} | {fault for fault, (checks, _) in CAUGHT_BY.items() if "pd-disaggregation" in checks}
# Said to queue (--flow-control): the faults of the echo EPP's queue; it reads no control plane, so it is told the
# priorities of the objectives priority-bands names.
FLOW_CONTROL = {"no-queue", "fifo-bands", "one-flow", "ttl-never"}
FLOW_FLAGS = "--default-request-ttl 5 --priorities eppkit-high=10,eppkit-low=0"


def judge(make_bed, fault: str, checks=None) -> dict:
    make, beds = make_bed
    flags = f" {FLOW_FLAGS}" if fault in FLOW_CONTROL else ""
    target = Target("external-epp", {"epp_command": f"{ECHO} --misbehave {fault}{flags}"}, shed_header="x-shed: 1",
                    saturation=fault in SATURATION, pd=fault in PD, flow_control=fault in FLOW_CONTROL)
    try:
        return run(target, make, runtime="local", checks=checks, budget=LOADED_MACHINE,
                   quick=fault not in SUSTAINED)
    finally:
        while beds:
            beds.pop().stop()


def test_the_echo_epp_without_a_fault_conforms(make_bed):
    report = judge(make_bed, "none")
    # (trailers-body-once: the echo EPP streams the body back and answers the trailers, as the protocol says; Envoy
    # then sends the body twice on a route with retries, envoyproxy/envoy#45470: a warning naming Envoy's issue)
    assert report["verdict"] == WARNINGS, rp.text(report)
    assert next(c for c in report["checks"] if c["id"] == "sustained-load")["status"] == "pass", rp.text(report)
    warned = {c["id"]: c for c in report["checks"] if c["status"] == "fail"}
    assert set(warned) == {"trailers-body-once"}, rp.text(report)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["pd-disaggregation"] == statuses["fail-closed"] == statuses["no-endpoint-503"] == "pass", \
        rp.text(report)
    assert "envoyproxy/envoy#45470" in warned["trailers-body-once"]["message"]


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_a_fault_fails_exactly_its_own_checks_under_both_client_protocols(make_bed, fault):
    checks, words = CAUGHT_BY[fault]
    report = judge(make_bed, fault)
    # (trailers-body-once warns about every EPP that streams the body back, this one included: Envoy's issue)
    failed = {c["id"]: c for c in report["checks"] if c["status"] == "fail" and c["id"] != "trailers-body-once"}
    missed = "\n".join(f"{c['id']} ({c['status']}): " + "\n  ".join(c["evidence"]) for c in report["checks"]
                       if c["id"] in checks - set(failed))  # what a check that let the fault through saw
    assert set(failed) == checks, rp.text(report) + "\n" + missed
    first = failed[min(checks, key=lambda c: [x["id"] for x in report["checks"]].index(c))]
    assert words in first["message"], first
    assert first["evidence"], "a failure carries Envoy's evidence"
    for check in checks:
        protocols = {"h2c"} if fault in H2C_ONLY else {"http/1.1", "h2c"}
        message = failed[check]["message"]
        said = {p for p in ("http/1.1", "h2c") if f"[{p}]" in message} or {"http/1.1", "h2c"}
        assert said == protocols, (check, message)
    if any(CHECKS.get(c).level == "must" for c in checks):
        assert report["verdict"] == "does not conform", report["verdict"]


def test_no_check_passes_against_an_epp_that_refuses_every_stream(make_bed):
    report = judge(make_bed, "healthy-but-refusing")
    passed = [c["id"] for c in report["checks"] if c["status"] == "pass"]
    # fail-open and fail-closed judge the gateway with no EPP at all, not this one
    assert set(passed) <= {"fail-open", "fail-closed"}, rp.text(report)
    serves = next(c for c in report["checks"] if c["id"] == "serves")
    assert "call status 14" in serves["message"] or "gRPC status 14" in serves["message"], serves["message"]


def test_a_single_check_runs_with_what_it_needs_and_never_says_conforms(make_bed):
    # GAIE #3033's EPP: its body replies come before the deferred headers reply. Alone, streamed-body-mutations
    # would pass on a 500; with reply-order run first, the run fails where the EPP does.
    report = judge(make_bed, "reply-out-of-order", checks=selected(["streamed-body-mutations"]))
    assert [c["id"] for c in report["checks"]] == ["reply-order", "streamed-body-mutations"]
    assert report["verdict"] == "does not conform", rp.text(report)
    clean = judge(make_bed, "none", checks=selected(["streamed-body-mutations"]))
    assert clean["verdict"] == "no verdict: a partial run", rp.text(clean)
