"""The routing checks (load-aware, lora-affinity): a pod that would not get busy, or would not run its adapter, in
its own words leaves the check not run, never passed; each declaration (--load-aware, --lora-affinity) reaches the
Target from the command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from eppkit.services.openai_server.lora_info import LoraInfo

from eppkit.conformance.checks import CHECKS, routing
from eppkit.conformance.checks.registry import NOT_APPLICABLE, NOT_RUN
from eppkit.conformance.suite import run_check
from eppkit.conformance.target import Target
from tests.support.own_testbed import NoLoad, OwnTestbedHarness

pytestmark = pytest.mark.unit

IDLE = {routing.RUNNING: 0.0, routing.WAITING: 0.0, routing.KV_USAGE: 0.0}
BUSY = {routing.RUNNING: 4.0, routing.WAITING: 4.0, routing.KV_USAGE: 0.69}


def harness(**declared):
    return OwnTestbedHarness(Target("ext_proc", **(declared or {"load_aware": True})),
                             [f"127.0.0.1:{9000 + i}" for i in range(3)])


def test_a_pod_that_would_not_get_busy_leaves_the_check_not_run(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", NoLoad)
    monkeypatch.setattr(routing, "scrape", lambda address: dict(IDLE))
    monkeypatch.setattr(routing, "BUSY_WITHIN_S", 0.1)
    h = harness()
    result = routing.load_aware(h)
    assert result.status == NOT_RUN, result
    assert "vllm-0 would not get busy: its /metrics showed vllm:num_requests_running 0" in result.message
    assert h.log == ["released"]  # no request was judged on a pod that was never busy; its testbed stopped


def test_busy_is_running_and_waiting_and_kv_blocks_in_use():
    assert routing.busy(BUSY)
    assert not routing.busy({**BUSY, routing.WAITING: 0.0})
    assert not routing.busy({**BUSY, routing.KV_USAGE: 0.0})
    assert "vllm:num_requests_waiting 4" in routing.load_words(BUSY)


# The routing checks an EPP declares (--load-aware, --lora-affinity): each a should, n/a unless declared.
DECLARED = [("load-aware", "load_aware"), ("lora-affinity", "lora_affinity")]


@pytest.mark.parametrize("name, field", DECLARED)
def test_a_routing_check_is_declared_like_cache_aware(name, field):
    check = CHECKS.get(name)
    assert check.level == "should" and not check.per_protocol
    result = run_check(check, SimpleNamespace(target=Target("ext_proc")), {})
    assert result.status == NOT_APPLICABLE and f"--{name}" in result.message
    assert Target("ext_proc", **{field: True}).describe()[field] is True


@pytest.mark.parametrize("name, field", DECLARED)
def test_the_command_line_declares_it(name, field):
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    assert getattr(target_from(parser().parse_args(["conformance", "--mode", "ext_proc", f"--{name}"])), field)
    assert not getattr(target_from(parser().parse_args(["conformance", "--mode", "ext_proc"])), field)


def test_the_busy_load_goes_to_loopback_only():
    with pytest.raises(ValueError, match="neither on loopback nor on the kit.s own pod network"):
        routing.BusyLoad("10.0.0.1:8000", "mock-llm")


def test_load_goes_straight_only_to_loopback_or_the_kits_own_pod_network():
    from eppkit.conformance.pods import reachable

    assert reachable("127.0.0.1:8000") and reachable("[::1]:8000") and reachable("10.233.1.2:9576")
    assert not reachable("10.0.0.1:8000") and not reachable("192.168.1.5:80") and not reachable("vllm-0:8000")


def test_a_pod_off_loopback_is_not_applicable():
    h = harness()
    h.testbed.backends[0].address = "10.0.0.1:8000"
    result = routing.load_aware(h)
    assert result.status == NOT_APPLICABLE and "neither on loopback nor on the kit's own pod network" in result.message


# -- lora-affinity --

def test_a_pod_that_would_not_run_its_adapter_leaves_the_check_not_run(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", NoLoad)
    monkeypatch.setattr(routing, "lora_of", lambda address: LoraInfo(max_lora=2))
    monkeypatch.setattr(routing, "LOADED_WITHIN_S", 0.1)
    h = harness(lora_affinity=True)
    result = routing.lora_affinity(h)
    assert result.status == NOT_RUN, result
    assert result.message.startswith("vllm-1 would not run sql-lora with room to spare: its /metrics showed "
                                     "running_lora_adapters=''"), result.message
    assert h.log == ["released"]  # no request was judged on a pod that never ran the adapter


def test_a_pod_without_the_lora_family_is_not_run_either(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", NoLoad)
    monkeypatch.setattr(routing, "lora_of", lambda address: None)
    monkeypatch.setattr(routing, "LOADED_WITHIN_S", 0.1)
    result = routing.lora_affinity(harness(lora_affinity=True))
    assert result.status == NOT_RUN and "no vllm:lora_requests_info" in result.message


def test_the_rule_is_judged_while_the_pod_runs_the_adapter_and_has_room():
    assert routing._running(LoraInfo(running=("sql-lora",), max_lora=2), "sql-lora")
    assert not routing._running(LoraInfo(running=("sql-lora",), max_lora=1), "sql-lora")  # no room
    assert not routing._running(LoraInfo(waiting=("sql-lora",), max_lora=2), "sql-lora")
    assert not routing._running(None, "sql-lora")


def test_an_anchor_off_loopback_is_not_applicable():
    h = harness()
    h.testbed.backends[2].address = "10.0.0.1:8000"
    result = routing.lora_affinity(h)
    assert result.status == NOT_APPLICABLE and "neither on loopback nor on the kit's own pod network" in result.message
