"""The load-aware check: a pod that would not get busy in its own words leaves it not run, never passed; its
declaration (--load-aware) reaches the Target from the command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eppkit.conformance.checks import CHECKS, routing
from eppkit.conformance.checks.registry import NOT_APPLICABLE, NOT_RUN
from eppkit.conformance.suite import run_check
from eppkit.conformance.target import Target

pytestmark = pytest.mark.unit

IDLE = {routing.RUNNING: 0.0, routing.WAITING: 0.0, routing.KV_USAGE: 0.0}
BUSY = {routing.RUNNING: 4.0, routing.WAITING: 4.0, routing.KV_USAGE: 0.69}


class Idle:
    """A busy load that never reaches the pod (nothing is sent)."""

    def __init__(self, *_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def close(self):
        pass


def harness(sent):
    pods = [SimpleNamespace(name=f"vllm-{i}", address=f"127.0.0.1:{9000 + i}", model="mock-llm") for i in range(3)]
    bed = SimpleNamespace(backends=pods)
    return SimpleNamespace(target=Target("ext_proc", load_aware=True), bed=lambda *a, **k: bed,
                           send=lambda *a, **k: sent.append(1))


def test_a_pod_that_would_not_get_busy_leaves_the_check_not_run(monkeypatch):
    monkeypatch.setattr(routing, "BusyLoad", Idle)
    monkeypatch.setattr(routing, "scrape", lambda address: dict(IDLE))
    monkeypatch.setattr(routing, "BUSY_WITHIN_S", 0.1)
    sent = []
    result = routing.load_aware(harness(sent))
    assert result.status == NOT_RUN, result
    assert "vllm-0 would not get busy: its /metrics showed vllm:num_requests_running 0" in result.message
    assert not sent  # no request was judged on a pod that was never busy


def test_busy_is_running_and_waiting_and_kv_blocks_in_use():
    assert routing.busy(BUSY)
    assert not routing.busy({**BUSY, routing.WAITING: 0.0})
    assert not routing.busy({**BUSY, routing.KV_USAGE: 0.0})
    assert "vllm:num_requests_waiting 4" in routing.load_words(BUSY)


def test_load_aware_is_declared_like_cache_aware():
    check = CHECKS.get("load-aware")
    assert check.level == "should" and not check.per_protocol
    result = run_check(check, SimpleNamespace(target=Target("ext_proc")), {})
    assert result.status == NOT_APPLICABLE and "--load-aware" in result.message
    assert Target("ext_proc", load_aware=True).describe()["load_aware"] is True


def test_the_command_line_declares_it():
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    args = parser().parse_args(["conformance", "--mode", "ext_proc", "--load-aware"])
    assert target_from(args).load_aware
    assert not target_from(parser().parse_args(["conformance", "--mode", "ext_proc"])).load_aware


def test_the_busy_load_goes_to_loopback_only():
    with pytest.raises(ValueError, match="not on loopback"):
        routing.BusyLoad("10.0.0.1:8000", "mock-llm")


def test_a_pod_off_loopback_is_not_applicable():
    h = harness([])
    h.bed().backends[0].address = "10.0.0.1:8000"
    result = routing.load_aware(h)
    assert result.status == NOT_APPLICABLE and "not on loopback" in result.message
