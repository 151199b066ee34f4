"""The verdict's checks of what 2026's EPPs claim beyond picking one pod: P/D disaggregation as llm-d does it
(pd-disaggregation, declared with --pd) with the kit's EPP as its reference, and the gateway's fail-closed answer
when the EPP is unreachable, proven by the same judgement failing a gateway configured to fail open.

The echo EPP's faults that fail pd-disaggregation and no-endpoint-503: test_conformance_fixtures.py.
"""

from __future__ import annotations

import pytest

from eppkit.conformance import report as rp
from eppkit.conformance.checks.data_plane import _without_epp
from eppkit.conformance.checks.latency import Budget
from eppkit.conformance.contract import judge_fail_closed
from eppkit.conformance.harness import Harness
from eppkit.conformance.suite import run, selected
from eppkit.conformance.target import Target
from tests.support.verdicts import local_beds

pytestmark = pytest.mark.e2e

LOADED_MACHINE = Budget(decision_ms=500, release_ms=500)


@pytest.fixture(scope="module")
def make_bed():
    with local_beds("jaeger-conformance-pd") as made:
        yield made


def stop(beds):
    while beds:
        beds.pop().stop()


def test_the_kits_epp_disaggregates_as_llm_d_does(make_bed):
    make, beds = make_bed
    try:
        report = run(Target("ext_proc", pd=True), make, runtime="local", budget=LOADED_MACHINE, quick=True,
                     checks=selected(["pd-disaggregation"]))
    finally:
        stop(beds)
    pd = next(c for c in report["checks"] if c["id"] == "pd-disaggregation")
    assert pd["status"] == "pass", rp.text(report)
    assert pd["message"] == "4 requests went to decode pods, each prefilled by the prefill pod the EPP named", pd
    assert any("vllm-p0, llm-d.ai/role=prefill" in line for line in pd["evidence"]), pd["evidence"]
    assert any("prefilled, in the pods' spans, by vllm-p0" in line for line in pd["evidence"]), pd["evidence"]


def test_fail_closed_is_the_gateways_5xx_and_the_same_judgement_fails_a_gateway_that_fails_open(make_bed):
    make, beds = make_bed
    h = Harness(Target("ext_proc"), make)
    try:
        closed = judge_fail_closed(_without_epp(h, "fail-closed", False))
        opened = judge_fail_closed(_without_epp(h, "fail-open", True))
    finally:
        h.stop()
        stop(beds)
    assert closed.status == "pass", (closed.message, closed.evidence)
    assert any("ext_proc" in line for line in closed.evidence), closed.evidence
    assert opened.status == "fail" and "request 1 reached vllm-" in opened.message, (opened.message, opened.evidence)
