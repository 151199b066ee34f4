"""The echo EPP's queue (services/echo_epp/queue.py) and its faults, without a process: the pool's load is set by
hand, as its scraper would; each fault breaks one rule and keeps the others."""

from __future__ import annotations

import asyncio

import pytest
from eppkit.services.echo_epp import MISBEHAVIOURS
from eppkit.services.echo_epp.queue import FAULTS, EchoQueue, parse_priorities
from eppkit.services.picker.flow_control import FAIRNESS_ID, Dropped
from eppkit.services.picker.headers import OBJECTIVE

PRIORITIES = {"eppkit-high": 10, "eppkit-low": 0}


def test_every_queue_fault_is_a_misbehaviour():
    assert set(FAULTS) <= set(MISBEHAVIOURS)


def test_priorities_are_name_equals_number():
    assert parse_priorities("a=1, b=-2") == {"a": 1, "b": -2}
    with pytest.raises(ValueError, match="name=priority"):
        parse_priorities("a")


async def served_order(misbehave: str, asks: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The labels of ``asks`` in the order the queue lets them on, one freed slot at a time."""
    queue = EchoQueue("127.0.0.1:8001", priorities=PRIORITIES, ttl_s=60, misbehave=misbehave)
    queue.flow.every_s = 0.001
    ep = queue.pool.endpoints[0]
    ep.waiting = 5.0  # saturated
    order: list[str] = []

    async def one(label: str, headers: dict[str, str]) -> None:
        await queue.admit(headers)
        queue.picked(ep.address)
        order.append(label)

    tasks = []
    for label, headers in asks:
        tasks.append(asyncio.create_task(one(label, headers)))
        await asyncio.sleep(0.002)
    for _ in asks:
        ep.waiting, ep.picked_since_scrape = 4.0, 0  # a scrape after one slot freed
        for _ in range(20):
            await asyncio.sleep(0.001)
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    await queue.stop()
    return order


BANDS = [("low-1", {OBJECTIVE: "eppkit-low"}), ("low-2", {OBJECTIVE: "eppkit-low"}),
         ("high-1", {OBJECTIVE: "eppkit-high"}), ("high-2", {OBJECTIVE: "eppkit-high"})]
FLOWS = [(f"{flow}{i}", {FAIRNESS_ID: flow}) for flow, n in (("a", 3), ("b", 2)) for i in range(1, n + 1)]


@pytest.mark.parametrize("misbehave, asks, expected", [
    ("none", BANDS, ["high-1", "high-2", "low-1", "low-2"]),
    ("none", FLOWS, ["a1", "b1", "a2", "b2", "a3"]),
    ("fifo-bands", BANDS, ["low-1", "low-2", "high-1", "high-2"]),
    ("fifo-bands", FLOWS, ["a1", "b1", "a2", "b2", "a3"]),  # fairness kept
    ("one-flow", FLOWS, ["a1", "a2", "a3", "b1", "b2"]),
    ("one-flow", BANDS, ["high-1", "high-2", "low-1", "low-2"]),  # bands kept
])
def test_the_queue_and_each_ordering_fault(misbehave, asks, expected):
    assert asyncio.run(served_order(misbehave, asks)) == expected


def test_no_queue_sheds_while_saturated_and_lets_on_otherwise():
    async def go():
        queue = EchoQueue("127.0.0.1:8001", priorities={}, ttl_s=60, misbehave="no-queue")
        assert await queue.admit({}) is None
        queue.pool.endpoints[0].waiting = 5.0
        with pytest.raises(Dropped) as dropped:
            await queue.admit({})
        assert dropped.value.status == 429

    asyncio.run(go())


def test_ttl_never_keeps_a_request_past_any_ttl():
    queue = EchoQueue("127.0.0.1:8001", priorities={}, ttl_s=5, misbehave="ttl-never")
    assert queue.flow.ttl_s > 365 * 24 * 3600
    assert EchoQueue("127.0.0.1:8001", priorities={}, ttl_s=5).flow.ttl_s == 5
