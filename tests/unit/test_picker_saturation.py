"""The picker sheds as GAIE's EPP v1.5.0 does: a request whose InferenceObjective has a negative priority gets 429
while the pool is saturated (the mean over its endpoints of max(waiting / 5, KV-cache usage / 0.8) at 1 or more);
priority 0 or more, or no objective known, is never shed for it."""

from __future__ import annotations

import asyncio

import pytest
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.saturation import Objectives, Saturation, priorities_for
from eppkit.services.picker.settings import DEFAULTS, PickerSettings, create_picker, service_args

pytestmark = pytest.mark.unit

OBJECTIVE = "x-gateway-inference-objective"


def loaded(waiting: float, kv: float = 0.0) -> PoolEndpoint:
    return PoolEndpoint("p", "127.0.0.1", 1, waiting=waiting, kv_usage=kv)


def test_gaies_defaults_and_its_roofline_mean():
    gaie = Saturation()
    assert (gaie.queue_depth_threshold, gaie.kv_cache_util_threshold) == (5, 0.8) == (
        DEFAULTS.queue_depth_threshold, DEFAULTS.kv_cache_util_threshold)
    assert gaie.of([loaded(5), loaded(0, kv=0.8)]) == pytest.approx(1.0)  # each endpoint full by one threshold
    assert gaie.of([loaded(10), loaded(0)]) == pytest.approx(1.0)  # one far over, one idle: saturated on average
    assert gaie.of([loaded(4), loaded(0, kv=0.79)]) < 1.0
    assert Saturation(0, 0).of([loaded(100, kv=1.0)]) == 0.0  # both thresholds off: never saturated
    assert Saturation(0, 0.8).of([loaded(100, kv=0.4)]) == pytest.approx(0.5)  # the queue not read


def test_a_requests_priority_is_its_objectives_and_0_without_one():
    objectives = Objectives({"sheddable": -1, "critical": 2})
    assert objectives.priority({OBJECTIVE: "sheddable"}) == -1
    assert objectives.priority({OBJECTIVE: "unknown"}) == 0 and objectives.priority({}) == 0


def test_only_the_pools_objectives_count_and_a_missing_priority_is_0():
    def objective(name, pool, priority=None, group=None):
        spec = {"poolRef": {"name": pool, **({"group": group} if group else {})}}
        return {"metadata": {"name": name}, "spec": {**spec, **({} if priority is None else {"priority": priority})}}

    found = priorities_for([objective("a", "vllm-pool", -1), objective("b", "other", 5), objective("c", "vllm-pool"),
                            objective("d", "vllm-pool", 3, group="inference.networking.x-k8s.io")], "vllm-pool")
    assert found == {"a": -1, "c": 0}


def picker_at(waiting: float, **settings):
    picker = create_picker(PickerSettings(scorer="round-robin", **settings), "a=127.0.0.1:1,b=127.0.0.1:2")
    for ep in picker.pool.endpoints:
        picker.pool.record_scrape(ep, {"vllm:num_requests_waiting": waiting, "vllm:num_requests_running": 2,
                                       "vllm:kv_cache_usage_perc": 0.1})
    picker.objectives.priorities = {"batch": -1, "standard": 0}
    return picker


def answer(picker, objective: str | None):
    request = LlmRequest(headers={OBJECTIVE: objective} if objective else {})
    try:
        return asyncio.run(picker.pick(request)).endpoint.name
    except PickError as exc:
        return exc


def test_a_sheddable_request_gets_429_only_while_the_pool_is_saturated():
    shed = answer(picker_at(6), "batch")
    assert isinstance(shed, PickError) and (shed.status, shed.code) == (429, "shed")
    assert "the pool is saturated (1.20" in shed.message and "priority -1" in shed.message
    assert "a: waiting=6 kv_cache=0.10" in shed.message
    assert answer(picker_at(6), "standard") in ("a", "b")  # priority 0: served
    assert answer(picker_at(6), None) in ("a", "b")  # no objective: priority 0
    assert answer(picker_at(4), "batch") in ("a", "b")  # under the thresholds: served
    assert answer(picker_at(6, queue_depth_threshold=10), "batch") in ("a", "b")  # thresholds of its own


def test_the_thresholds_are_settings_passed_to_the_services_only_when_not_gaies():
    assert "--queue-depth-threshold" not in service_args(PickerSettings(), [])
    args = service_args(PickerSettings(queue_depth_threshold=8, kv_cache_util_threshold=0.5), [])
    assert args[args.index("--queue-depth-threshold") + 1] == "8"
    assert args[args.index("--kv-cache-util-threshold") + 1] == "0.5"
    with pytest.raises(ValueError, match="cannot be negative"):
        PickerSettings(queue_depth_threshold=-1).validate()
    with pytest.raises(ValueError, match="a share of the KV cache"):
        PickerSettings(kv_cache_util_threshold=80).validate()
