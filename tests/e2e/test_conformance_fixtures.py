"""Each conformance check is proven by an EPP that breaks its rule: the echo EPP with ``--misbehave`` commits
one protocol fault, and the suite fails exactly that fault's check (a check that needs it is not run, never
failed), with a message a person can act on. The same EPP without a fault conforms.

The checks' logic is the same whichever runtime hosts the testbeds; these run on the local one (the suite
against the kit's EPPs runs on both: test_conformance_suite.py).
"""

from __future__ import annotations

import sys

import pytest
from eppkit.services.echo_epp import MISBEHAVIOURS

from eppkit.conformance import report as rp
from eppkit.conformance.suite import run
from eppkit.conformance.target import Target
from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.local import new_run_dir

pytestmark = pytest.mark.e2e

ECHO = f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}} --shed-header x-shed"
# fault -> the check that catches it, and words its failure message must use
CAUGHT_BY = {
    "reply-out-of-order": ("reply-order", "out of order"),
    "buffered-body-mutation": ("streamed-body-mutations", "streamed_response"),
    "drop-end-of-stream": ("end-of-stream", "end_of_stream"),
    "change-body": ("bodies-byte-for-byte", "as the client sent it"),
    "wait-for-body": ("request-without-body", "end_of_stream"),
    "stall-response": ("response-phases", "response body chunk"),
    "destination-mismatch": ("same-destination", "same value"),
    "no-health-services": ("health-services", "liveness"),
    "one-stream": ("concurrent-streams", "every stream"),
    "own-trace": ("trace-context", "trace of their own"),
}


def test_every_fault_the_echo_epp_can_commit_has_its_check():
    assert set(CAUGHT_BY) == set(MISBEHAVIOURS) - {"none"}


@pytest.fixture(scope="module")
def make_bed():
    """Local testbeds sharing one Jaeger, each stopped after its test."""
    beds: list = []
    with create_jaeger("local", new_run_dir("jaeger-conformance-fixtures")) as jaeger:
        def make(topology):
            bed = create(topology, runtime="local", jaeger=jaeger)
            beds.append(bed)
            return bed.start()

        yield make, beds


def judge(make_bed, fault: str) -> dict:
    make, beds = make_bed
    target = Target("external-epp", {"epp_command": f"{ECHO} --misbehave {fault}"}, shed_header="x-shed: 1")
    try:
        return run(target, make, runtime="local", request_timeout_s=4.0)
    finally:
        while beds:
            beds.pop().stop()


def test_the_echo_epp_without_a_fault_conforms(make_bed):
    report = judge(make_bed, "none")
    assert report["verdict"] == "conforms", rp.text(report)


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_a_fault_fails_exactly_its_own_check(make_bed, fault):
    check, words = CAUGHT_BY[fault]
    report = judge(make_bed, fault)
    failed = {c["id"]: c for c in report["checks"] if c["status"] == "fail"}
    assert set(failed) == {check}, rp.text(report)
    assert words in failed[check]["message"], failed[check]
    assert failed[check]["evidence"], "a failure carries Envoy's evidence"
