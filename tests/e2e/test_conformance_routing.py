"""Routing judged black-box, each rule declared by the EPP: the kit's EPP passes with the scorer that reads what
the rule is about and fails with round robin, in the pods' own words (their /metrics, the pod each answer names).
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
# The echo EPP picks round robin and reads no metrics: said load-aware, it fails that check and only that one.
ECHO = f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}}"


def judge(factory, target: Target, check: str = "load-aware") -> dict:
    report = run(target, factory, runtime="local", checks=selected([check]), budget=LOADED_MACHINE)
    return next(c for c in report["checks"] if c["id"] == check)


def test_load_aware_passes_the_queue_scorer_and_fails_round_robin(eppkit_testbed_factory):
    # One pod made busy with long streams sent straight to it: the queue scorer (it scrapes the pods' /metrics)
    # keeps new requests off it; round robin sends it one in three.
    passing = judge(eppkit_testbed_factory, Target("ext_proc", {"scorer": "queue-scorer"}, load_aware=True))
    assert passing["status"] == "pass", passing
    assert "went to the other pods while vllm-0 was busy" in passing["message"], passing["message"]
    said = " ".join(passing["evidence"])
    assert "vllm:num_requests_waiting" in said and "vllm:kv_cache_usage_perc" in said, passing["evidence"]
    assert "where the 20 requests went" in said, passing["evidence"]
    failing = judge(eppkit_testbed_factory, Target("ext_proc", {"scorer": "round-robin"}, load_aware=True))
    assert failing["status"] == "fail", failing
    assert "went to vllm-0 while its /metrics showed" in failing["message"], failing["message"]
    assert any("Envoy sent it to vllm-0" in line for line in failing["evidence"]), failing["evidence"]


def test_load_aware_is_not_applicable_unless_declared(eppkit_testbed_factory):
    report = run(Target("ext_proc"), eppkit_testbed_factory, runtime="local", checks=selected(["load-aware"]),
                 budget=LOADED_MACHINE)
    check = next(c for c in report["checks"] if c["id"] == "load-aware")
    assert check["status"] == "n/a" and "--load-aware" in check["message"], rp.text(report)


@pytest.mark.parametrize("name, field", [("load-aware", "load_aware"), ("lora-affinity", "lora_affinity")])
def test_the_echo_epp_said_to_route_by_it_fails_that_check_alone(eppkit_testbed_factory, name, field):
    target = Target("external-epp", {"epp_command": ECHO}, **{field: True})
    report = run(target, eppkit_testbed_factory, runtime="local", checks=selected([name]), budget=LOADED_MACHINE)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses.pop(name) == "fail", rp.text(report)
    assert set(statuses.values()) == {"pass"}, rp.text(report)  # what it needs: served


def test_lora_affinity_passes_the_lora_affinity_scorer_and_fails_round_robin(eppkit_testbed_factory):
    # Two adapters made to run, each on a pod of its own, by long streams sent straight to it: the lora-affinity
    # scorer (it scrapes vllm:lora_requests_info) sends each adapter's requests there; round robin one in three.
    passing = judge(eppkit_testbed_factory, Target("ext_proc", {"scorer": "lora-affinity-scorer"}, lora_affinity=True),
                    "lora-affinity")
    assert passing["status"] == "pass", passing
    assert "10 of 10 sql-lora requests to vllm-1, 10 of 10 chat-lora requests to vllm-2" in passing["message"], passing
    said = " ".join(passing["evidence"])
    assert "running_lora_adapters='sql-lora'" in said and "max_lora=2" in said, passing["evidence"]
    assert "where the 20 requests went" in said, passing["evidence"]
    failing = judge(eppkit_testbed_factory, Target("ext_proc", {"scorer": "round-robin"}, lora_affinity=True),
                    "lora-affinity")
    assert failing["status"] == "fail", failing
    assert "requests for sql-lora went elsewhere while vllm-1's /metrics showed" in failing["message"], failing
    assert any("Envoy sent it to vllm-0" in line for line in failing["evidence"]), failing["evidence"]
