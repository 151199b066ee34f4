"""Flow control judged black-box (declared: --flow-control): one pod saturated for real, freed a slot at a time; the
kit's EPP with flow control (the reference) and the echo EPP's own queue pass all four checks, and each is n/a
unless declared. Each fault of the echo EPP's queue failing exactly its check: tests/e2e/test_conformance_fixtures.py.
"""

from __future__ import annotations

import sys

import pytest

from eppkit.conformance import report as rp
from eppkit.conformance.checks.latency import Budget
from eppkit.conformance.suite import run, selected
from eppkit.conformance.target import Target

pytestmark = pytest.mark.e2e

LOADED_MACHINE = Budget(decision_ms=500, release_ms=500)
FLOW_CHECKS = ("queued-then-served", "priority-bands", "fairness", "ttl-drop")
ECHO = (f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}} "
        "--flow-control --default-request-ttl 5 --priorities eppkit-high=10,eppkit-low=0")


def judge(factory, target: Target) -> dict:
    report = run(target, factory, runtime="local", checks=selected(FLOW_CHECKS), budget=LOADED_MACHINE)
    return {c["id"]: c for c in report["checks"]}, report


@pytest.mark.parametrize("target", [
    Target("ext_proc", flow_control=True),
    Target("external-epp", {"epp_command": ECHO}, flow_control=True),
], ids=["kit-epp", "echo-epp"])
def test_an_epp_with_flow_control_passes_the_four_checks(eppkit_testbed_factory, target):
    checks, report = judge(eppkit_testbed_factory, target)
    assert {name: checks[name]["status"] for name in FLOW_CHECKS} == dict.fromkeys(FLOW_CHECKS, "pass"), \
        rp.text(report)
    said = " ".join(checks["ttl-drop"]["evidence"])
    assert "x-llm-d-request-dropped-reason: rejected-ttl-expired" in said, checks["ttl-drop"]["evidence"]
    assert "vllm:num_requests_waiting 5" in " ".join(checks["queued-then-served"]["evidence"])


def test_the_flow_control_checks_are_not_applicable_unless_declared(eppkit_testbed_factory):
    checks, _ = judge(eppkit_testbed_factory, Target("ext_proc"))
    for name in FLOW_CHECKS:
        assert checks[name]["status"] == "n/a" and "--flow-control" in checks[name]["message"], checks[name]


def test_the_kit_epp_without_flow_control_fails_queued_then_served(eppkit_testbed_factory):
    # Declared but off: its requests go on into the saturated pod's queue (sheddable ones aside, none here).
    checks, report = judge(eppkit_testbed_factory, Target("ext_proc", {"flow_control": False}, flow_control=True))
    assert checks["queued-then-served"]["status"] == "fail", rp.text(report)
    assert "before the pod had room" in checks["queued-then-served"]["message"]
