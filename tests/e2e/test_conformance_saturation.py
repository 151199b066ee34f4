"""Saturation judged black-box (declared: --saturation): every pod saturated for real, two InferenceObjectives in the
testbed's control plane; the kit's EPP (the reference) sheds the sheddable and serves the rest; an EPP that sheds
nothing and one that sheds everything fail, the kit's (options) and the echo EPP (faults), each that check alone.
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
# The echo EPP reads no objective and no load: it sheds nothing (one peer); with shed-every-objective it sheds every
# request that names an objective (the other).
ECHO = f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}}"


def judge(factory, target: Target) -> dict:
    report = run(target, factory, runtime="local", checks=selected(["saturation"]), budget=LOADED_MACHINE)
    return next(c for c in report["checks"] if c["id"] == "saturation")


def test_the_kit_epp_sheds_the_sheddable_and_serves_the_rest(eppkit_testbed_factory):
    passing = judge(eppkit_testbed_factory, Target("ext_proc", saturation=True))
    assert passing["status"] == "pass", (passing["message"], passing["evidence"])
    assert "6 of 6 sheddable requests got 429 from the EPP (OpenAI JSON) and 6 of 6 of priority 0 were served" in \
        passing["message"], passing["message"]
    said = " ".join(passing["evidence"])
    assert "eppkit-sheddable (priority -1), eppkit-standard (priority 0)" in said, passing["evidence"]
    assert "vllm:num_requests_waiting 6" in said, passing["evidence"]


@pytest.mark.parametrize("options, said", [
    # Both thresholds off: the pool is never saturated for it, so it sheds nothing.
    ({"queue_depth_threshold": 0.0, "kv_cache_util_threshold": 0.0},
     "x-gateway-inference-objective: eppkit-sheddable, priority -1) was served"),
    # Its older hook on: every request shed while every pod has one waiting, whatever its priority.
    ({"shed_queue_threshold": 1.0}, "priority 0) was shed"),
], ids=["sheds-nothing", "sheds-everything"])
def test_the_kit_epp_that_sheds_nothing_or_everything_fails_saturation(eppkit_testbed_factory, options, said):
    failing = judge(eppkit_testbed_factory, Target("ext_proc", options, saturation=True))
    assert failing["status"] == "fail", failing
    assert said in failing["message"], failing


def test_saturation_is_not_applicable_unless_declared(eppkit_testbed_factory):
    check = judge(eppkit_testbed_factory, Target("ext_proc"))
    assert check["status"] == "n/a" and "--saturation" in check["message"], check


@pytest.mark.parametrize("misbehave, said", [
    ("none", "priority -1) was served"),
    ("shed-every-objective", "priority 0) was shed"),
])
def test_the_echo_epp_that_sheds_nothing_or_everything_fails_saturation_alone(eppkit_testbed_factory, misbehave,
                                                                               said):
    target = Target("external-epp", {"epp_command": f"{ECHO} --misbehave {misbehave}"}, saturation=True)
    report = run(target, eppkit_testbed_factory, runtime="local", checks=selected(["saturation"]),
                 budget=LOADED_MACHINE)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses.pop("saturation") == "fail", rp.text(report)
    assert set(statuses.values()) == {"pass"}, rp.text(report)  # what it needs: served
    check = next(c for c in report["checks"] if c["id"] == "saturation")
    assert said in check["message"], check["message"]
