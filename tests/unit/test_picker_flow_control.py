"""Flow control in the kit's picker (services/picker/flow_control.py): the order of the queue (bands, fairness,
first come first served within a flow), its TTL and band limit, and the picker holding a request while the pool is
saturated. No sleep longer than the dispatcher's own tick (1 ms here): the clock is the test's."""

from __future__ import annotations

import asyncio

import pytest
from eppkit.services.picker import flow_control as fc
from eppkit.services.picker.core import Picker
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.saturation import Saturation
from eppkit.services.picker.settings import PickerSettings, service_args
from eppkit.services.picker import scorers


def drained(queue: fc.FlowQueue) -> list[str]:
    out = []
    while (item := queue.pop()) is not None:
        out.append(item.label)
    return out


def test_a_higher_band_goes_first_whatever_came_first():
    queue = fc.FlowQueue()
    for label, priority in (("low-1", 0), ("low-2", 0), ("high-1", 10), ("mid-1", 5), ("high-2", 10)):
        queue.push(fc.DEFAULT_FLOW, priority, 0.0, label)
    assert drained(queue) == ["high-1", "high-2", "mid-1", "low-1", "low-2"]


def test_round_robin_takes_one_request_per_flow_in_turn():
    queue = fc.FlowQueue()
    for label in ("a1", "a2", "a3", "b1", "b2", "c1"):
        queue.push(label[0], 0, 0.0, label)
    assert drained(queue) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_a_flow_that_comes_back_waits_for_its_turn_behind_those_already_waiting():
    queue = fc.FlowQueue()
    queue.push("a", 0, 0.0, "a1")
    queue.push("b", 0, 0.0, "b1")
    assert queue.pop().label == "a1"
    queue.push("a", 0, 0.0, "a2")  # a had its turn: b's comes first
    assert drained(queue) == ["b1", "a2"]


def test_global_strict_serves_the_first_come_whatever_its_flow():
    queue = fc.FlowQueue(policy=fc.GLOBAL_STRICT)
    for label in ("a1", "a2", "b1", "a3", "b2"):
        queue.push(label[0], 0, 0.0, label)
    assert drained(queue) == ["a1", "a2", "b1", "a3", "b2"]


def test_ttl_takes_out_exactly_the_requests_that_waited_it():
    queue = fc.FlowQueue()
    queue.push("a", 0, 0.0, "old")
    queue.push("b", 5, 1.0, "older-band")
    queue.push("a", 0, 2.5, "young")
    assert sorted(i.label for i in queue.expired(now=3.0, ttl_s=2.0)) == ["old", "older-band"]
    assert drained(queue) == ["young"]


def test_a_full_band_rejects_the_next_request_and_leaves_other_bands_open():
    queue = fc.FlowQueue(max_per_band=2)
    queue.push("a", 0, 0.0)
    queue.push("b", 0, 0.0)
    with pytest.raises(fc.BandFull, match="priority_band_max_requests 2"):
        queue.push("c", 0, 0.0)
    queue.push("c", 1, 0.0)  # another band
    assert len(queue) == 3


def test_the_fairness_id_is_llm_ds_header_then_gaies_then_the_default_flow():
    assert fc.fairness_id({fc.FAIRNESS_ID: "tenant-a", fc.FAIRNESS_ID_GAIE: "x"}) == "tenant-a"
    assert fc.fairness_id({fc.FAIRNESS_ID_GAIE: "tenant-b"}) == "tenant-b"
    assert fc.fairness_id({}) == fc.DEFAULT_FLOW


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def settle(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0.002)


def test_the_controller_sends_a_request_on_at_once_when_nothing_waits_and_the_pool_has_room():
    async def go():
        flow = fc.FlowController(lambda: False, lambda: True)
        assert await flow.admit(0, "a") == 0.0

    asyncio.run(go())


def test_the_controller_lets_one_request_on_per_freed_slot_by_band():
    async def go():
        room = {"slots": 0}
        order: list[str] = []

        def saturated() -> bool:
            return room["slots"] <= 0

        flow = fc.FlowController(saturated, lambda: True, every_s=0.001)

        async def request(label: str, priority: int) -> None:
            await flow.admit(priority, "a")
            room["slots"] -= 1  # the pick the picker then makes takes the slot
            order.append(label)

        tasks = [asyncio.create_task(request(label, p)) for label, p in (("low", 0), ("high", 10))]
        await settle()
        assert order == [] and len(flow.queue) == 2
        room["slots"] = 1
        await settle()
        assert order == ["high"]
        room["slots"] = 1
        await asyncio.gather(*tasks)
        assert order == ["high", "low"]
        await flow.close()

    asyncio.run(go())


@pytest.mark.parametrize("up, status, reason", [(True, 429, fc.TTL_EXPIRED), (False, 503, fc.NO_ENDPOINTS)])
def test_a_request_past_its_ttl_is_dropped_with_429_or_503_naming_the_reason(up, status, reason):
    async def go():
        clock = Clock()
        flow = fc.FlowController(lambda: True, lambda: up, ttl_s=60, clock=clock, every_s=0.001)
        waiting = asyncio.create_task(flow.admit(0, "a"))
        await settle()
        assert not waiting.done()
        clock.now += 60
        with pytest.raises(fc.Dropped) as dropped:
            await asyncio.wait_for(waiting, 1)
        assert (dropped.value.status, dropped.value.reason) == (status, reason)
        assert "past its TTL of 60 s" in dropped.value.message
        await flow.close()

    asyncio.run(go())


def test_a_cancelled_request_leaves_the_queue():
    async def go():
        flow = fc.FlowController(lambda: True, lambda: True, every_s=0.001)
        waiting = asyncio.create_task(flow.admit(0, "a"))
        await settle()
        waiting.cancel()
        await settle()
        assert len(flow.queue) == 0
        await flow.close()

    asyncio.run(go())


def saturated_picker(**flow) -> Picker:
    pool = Pool(parse_endpoints("vllm-1=127.0.0.1:8001"))
    pool.endpoints[0].waiting = 5.0  # GAIE's queue depth threshold: saturated
    return Picker(pool, scorers.create("queue-scorer", {}), saturation=Saturation(), flow=flow)


def test_the_picker_holds_a_request_while_the_pool_is_saturated_and_sends_it_when_a_slot_frees():
    async def go():
        picker = saturated_picker()
        picker.flow.every_s = 0.001
        decision = asyncio.create_task(picker.pick(LlmRequest(headers={fc.FAIRNESS_ID: "a"})))
        await settle()
        assert not decision.done()
        picker.pool.endpoints[0].waiting = 4.0  # a slot frees: one request on, counted as waiting there
        assert (await asyncio.wait_for(decision, 1)).address == "127.0.0.1:8001"
        assert picker._no_room()  # 4 waiting + the one just sent
        await picker.close()

    asyncio.run(go())


def test_a_ttl_drop_is_a_pick_error_with_llm_ds_dropped_reason_header():
    async def go():
        picker = saturated_picker(ttl_s=0.01)
        picker.flow.every_s = 0.001
        with pytest.raises(PickError) as err:
            await asyncio.wait_for(picker.pick(LlmRequest(headers={})), 1)
        assert err.value.status == 429 and err.value.headers == {fc.DROPPED_REASON: fc.TTL_EXPIRED}
        await picker.close()

    asyncio.run(go())


def test_flow_control_is_off_by_default_and_its_flags_follow_llm_ds_names():
    assert PickerSettings().flow() is None
    on = PickerSettings(flow_control=True, default_request_ttl=2.0, fairness_policy="global-strict").validate()
    assert on.flow() == {"ttl_s": 2.0, "max_per_band": 5000, "policy": "global-strict"}
    args = service_args(on, [])
    assert args[args.index("--flow-control"):] == ["--flow-control", "--default-request-ttl", "2",
                                                   "--fairness-policy", "global-strict"]
    assert "--flow-control" not in service_args(PickerSettings(), [])
    with pytest.raises(ValueError, match="fairness_policy"):
        PickerSettings(fairness_policy="lottery").validate()
