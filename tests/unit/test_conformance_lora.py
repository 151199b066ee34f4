"""The lora-affinity check: a pod that would not run its adapter, in its own words, leaves it not run, never passed;
its declaration (--lora-affinity) reaches the Target from the command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from eppkit.services.openai_server.lora_info import LoraInfo

from eppkit.conformance.checks import CHECKS, routing
from eppkit.conformance.checks.registry import NOT_APPLICABLE, NOT_RUN
from eppkit.conformance.suite import run_check
from eppkit.conformance.target import Target

pytestmark = pytest.mark.unit


class Nothing:
    """A load that never reaches the pod (nothing is sent)."""

    def __init__(self, *_, **__):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass


def harness(sent):
    pods = [SimpleNamespace(name=f"vllm-{i}", address=f"127.0.0.1:{9000 + i}", model="mock-llm") for i in range(3)]
    bed = SimpleNamespace(backends=pods)
    return SimpleNamespace(target=Target("ext_proc", lora_affinity=True), bed=lambda *a, **k: bed,
                           send=lambda *a, **k: sent.append(1))


def test_a_pod_that_would_not_run_its_adapter_leaves_the_check_not_run(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", Nothing)
    monkeypatch.setattr(routing, "lora_of", lambda address: LoraInfo(max_lora=2))
    monkeypatch.setattr(routing, "LOADED_WITHIN_S", 0.1)
    sent = []
    result = routing.lora_affinity(harness(sent))
    assert result.status == NOT_RUN, result
    assert result.message.startswith("vllm-1 would not run sql-lora with room to spare: its /metrics showed "
                                     "running_lora_adapters=''"), result.message
    assert not sent  # no request was judged on a pod that never ran the adapter


def test_a_pod_without_the_lora_family_is_not_run_either(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", Nothing)
    monkeypatch.setattr(routing, "lora_of", lambda address: None)
    monkeypatch.setattr(routing, "LOADED_WITHIN_S", 0.1)
    result = routing.lora_affinity(harness([]))
    assert result.status == NOT_RUN and "no vllm:lora_requests_info" in result.message


def test_the_rule_is_judged_while_the_pod_runs_the_adapter_and_has_room():
    assert routing._running(LoraInfo(running=("sql-lora",), max_lora=2), "sql-lora")
    assert not routing._running(LoraInfo(running=("sql-lora",), max_lora=1), "sql-lora")  # no room
    assert not routing._running(LoraInfo(waiting=("sql-lora",), max_lora=2), "sql-lora")
    assert not routing._running(None, "sql-lora")


def test_lora_affinity_is_declared_like_load_aware():
    check = CHECKS.get("lora-affinity")
    assert check.level == "should" and not check.per_protocol
    result = run_check(check, SimpleNamespace(target=Target("ext_proc")), {})
    assert result.status == NOT_APPLICABLE and "--lora-affinity" in result.message
    assert Target("ext_proc", lora_affinity=True).describe()["lora_affinity"] is True


def test_the_command_line_declares_it():
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    args = parser().parse_args(["conformance", "--mode", "ext_proc", "--lora-affinity"])
    assert target_from(args).lora_affinity
    assert not target_from(parser().parse_args(["conformance", "--mode", "ext_proc"])).lora_affinity


def test_an_anchor_off_loopback_is_not_applicable():
    h = harness([])
    h.bed().backends[2].address = "10.0.0.1:8000"
    result = routing.lora_affinity(h)
    assert result.status == NOT_APPLICABLE and "not on loopback" in result.message
