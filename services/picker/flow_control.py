"""Flow control: while the pool is saturated, requests wait in the EPP instead of being sent on or shed, as
llm-d-router (v0.10, its ``flowControl`` feature gate) does it.

A request belongs to a *flow*: its priority band (the priority of the InferenceObjective it names, as
:class:`~eppkit.services.picker.saturation.Objectives` reads it) and its fairness id (``x-llm-d-inference-fairness-id``,
or GAIE's older ``x-gateway-inference-fairness-id``; none: ``default-flow``). While the pool is not saturated and
nothing waits, a request goes on at once. Otherwise it waits in its flow's queue; a dispatcher hands the next one
on each time the pool has room again, in this order:

1. the highest priority band that has a request waiting first;
2. within a band, the fairness policy: ``round-robin`` (llm-d's default across tenants: one request per flow in
   turn) or ``global-strict`` (the request that arrived first, whatever its flow);
3. within a flow, first come first served.

A request waits at most ``default_request_ttl`` seconds (llm-d's default: 60); past it, it is dropped with 429 when
the pool has endpoints and 503 when it has none, and a band holds at most ``priority_band_max_requests`` (llm-d's
default: 5,000; one more is rejected at once with 429). Each drop names its reason in
``x-llm-d-request-dropped-reason`` with llm-d's values (``rejected-ttl-expired``, ``rejected-saturated``,
``rejected-no-endpoints``). With flow control on, GAIE's legacy shedding of sheddable requests is off: they wait in
their band like the others (llm-d's flow controller replaces the legacy admission).

"Room again" is the pool's saturation (:class:`~eppkit.services.picker.saturation.Saturation`, GAIE's utilization
detector) with the requests the picker sent since each endpoint's last scrape counted as waiting there: a freed
slot lets one request on, not the whole queue. :class:`FlowQueue` is the order alone (no clock, no asyncio);
:class:`FlowController` waits on it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("picker.flow_control")

# The headers, as llm-d-router names them (the GAIE name first read by older gateways, second).
FAIRNESS_ID = "x-llm-d-inference-fairness-id"
FAIRNESS_ID_GAIE = "x-gateway-inference-fairness-id"
FAIRNESS_HEADERS = (FAIRNESS_ID, FAIRNESS_ID_GAIE)
DROPPED_REASON = "x-llm-d-request-dropped-reason"
DEFAULT_FLOW = "default-flow"  # llm-d's flow for a request that names none
# llm-d-router's drop reasons (its x-llm-d-request-dropped-reason values).
TTL_EXPIRED, SATURATED, NO_ENDPOINTS = "rejected-ttl-expired", "rejected-saturated", "rejected-no-endpoints"
# The fairness policies within a band.
ROUND_ROBIN, GLOBAL_STRICT = "round-robin", "global-strict"
FAIRNESS_POLICIES = (ROUND_ROBIN, GLOBAL_STRICT)
# llm-d-router's defaults.
DEFAULT_REQUEST_TTL_S = 60.0
PRIORITY_BAND_MAX_REQUESTS = 5000
DISPATCH_EVERY_S = 0.02  # how often the dispatcher looks at the pool while requests wait


def fairness_id(request_headers: dict[str, str]) -> str:
    """The request's flow within its band: its fairness id header, or ``default-flow``."""
    for name in FAIRNESS_HEADERS:
        value = (request_headers.get(name) or "").strip()
        if value:
            return value
    return DEFAULT_FLOW


class Dropped(Exception):
    """A request flow control will not send on: its status (429, 503) and llm-d's reason."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class BandFull(Exception):
    """The band already holds ``priority_band_max_requests``."""


@dataclass(eq=False)
class Queued:
    """One waiting request."""

    flow: str
    priority: int
    arrived: float
    seq: int  # arrival order across bands (global-strict's tie-break, and the tests')
    waiter: asyncio.Future | None = None
    label: str = ""  # what the tests call it


@dataclass
class Band:
    """The flows of one priority, each a first-come-first-served queue, in the order they last got a turn."""

    priority: int
    policy: str = ROUND_ROBIN
    flows: OrderedDict[str, deque[Queued]] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return sum(len(q) for q in self.flows.values())

    def push(self, item: Queued) -> None:
        self.flows.setdefault(item.flow, deque()).append(item)

    def pop(self) -> Queued | None:
        """The next request of this band by its fairness policy, or None."""
        if not self.flows:
            return None
        if self.policy == GLOBAL_STRICT:
            flow = min(self.flows, key=lambda f: self.flows[f][0].seq)
        else:  # round robin: the flow that waited longest for a turn, then it goes to the back
            flow = next(iter(self.flows))
        queue = self.flows.pop(flow)
        item = queue.popleft()
        if queue:
            self.flows[flow] = queue  # re-inserted: now last in turn
        return item

    def remove(self, item: Queued) -> bool:
        queue = self.flows.get(item.flow)
        if queue is None or item not in queue:
            return False
        queue.remove(item)
        if not queue:
            del self.flows[item.flow]
        return True

    def expired(self, deadline: float) -> list[Queued]:
        """Take out every request that arrived before ``deadline``."""
        out = [item for queue in self.flows.values() for item in queue if item.arrived < deadline]
        for item in out:
            self.remove(item)
        return out


class FlowQueue:
    """Every waiting request, by band: the order of flow control without its clock."""

    def __init__(self, *, max_per_band: int = PRIORITY_BAND_MAX_REQUESTS, policy: str = ROUND_ROBIN):
        if policy not in FAIRNESS_POLICIES:
            raise ValueError(f"fairness policy {policy!r}: one of {', '.join(FAIRNESS_POLICIES)}")
        if max_per_band < 1:
            raise ValueError(f"priority_band_max_requests must be 1 or more (got {max_per_band})")
        self.max_per_band, self.policy = max_per_band, policy
        self.bands: dict[int, Band] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(len(b) for b in self.bands.values())

    def push(self, flow: str, priority: int, arrived: float, label: str = "") -> Queued:
        band = self.bands.setdefault(priority, Band(priority, self.policy))
        if len(band) >= self.max_per_band:
            raise BandFull(f"priority band {priority} already holds {len(band)} requests "
                           f"(priority_band_max_requests {self.max_per_band})")
        item = Queued(flow, priority, arrived, next(self._seq), label=label)
        band.push(item)
        return item

    def pop(self) -> Queued | None:
        """The next request to send on: the highest band's, by its fairness policy."""
        for priority in sorted(self.bands, reverse=True):
            item = self.bands[priority].pop()
            if item is not None:
                return item
        return None

    def remove(self, item: Queued) -> bool:
        band = self.bands.get(item.priority)
        return band is not None and band.remove(item)

    def expired(self, now: float, ttl_s: float) -> list[Queued]:
        """Take out every request that has waited ``ttl_s`` or longer at ``now``."""
        return [item for band in self.bands.values() for item in band.expired(now - ttl_s + 1e-9)]


class FlowController:
    """Holds a request (:meth:`admit`) until the pool has room for it, its TTL runs out, or its band is full.

    ``saturated()``: whether the pool has no room now (it counts the picks since the last scrape); ``endpoints()``:
    whether the pool has any endpoint up (a TTL drop's 429 or 503)."""

    def __init__(self, saturated: Callable[[], bool], endpoints: Callable[[], bool], *,
                 ttl_s: float = DEFAULT_REQUEST_TTL_S, max_per_band: int = PRIORITY_BAND_MAX_REQUESTS,
                 policy: str = ROUND_ROBIN, clock: Callable[[], float] = time.monotonic,
                 every_s: float = DISPATCH_EVERY_S):
        if ttl_s <= 0:
            raise ValueError(f"default_request_ttl must be more than 0 seconds (got {ttl_s:g})")
        self.queue = FlowQueue(max_per_band=max_per_band, policy=policy)
        self.saturated, self.endpoints = saturated, endpoints
        self.ttl_s, self.clock, self.every_s = ttl_s, clock, every_s
        self._dispatcher: asyncio.Task | None = None

    async def admit(self, priority: int, flow: str) -> float:
        """Wait for the request's turn; the seconds it waited. Raises :class:`Dropped` (TTL, band full)."""
        if not len(self.queue) and not self.saturated():
            return 0.0
        arrived = self.clock()
        try:
            item = self.queue.push(flow, priority, arrived)
        except BandFull as exc:
            raise Dropped(429, SATURATED, f"request rejected by flow control: {exc}") from None
        item.waiter = asyncio.get_running_loop().create_future()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.create_task(self._dispatch(), name="flow-control-dispatch")
        try:
            await item.waiter
        except asyncio.CancelledError:  # the client went away: its place is freed
            self.queue.remove(item)
            raise
        return self.clock() - arrived

    async def _dispatch(self) -> None:
        while len(self.queue):
            self._drop_expired()
            while len(self.queue) and not self.saturated():
                item = self.queue.pop()
                if item is None or item.waiter is None or item.waiter.done():
                    continue
                item.waiter.set_result(None)
                # Its picker runs before this loop looks again (its task was woken first): the pick it makes counts
                # in saturated() and one freed slot lets one request on.
                await asyncio.sleep(0)
            await asyncio.sleep(self.every_s)

    def _drop_expired(self) -> None:
        for item in self.queue.expired(self.clock(), self.ttl_s):
            if item.waiter is None or item.waiter.done():
                continue
            up = self.endpoints()
            status, reason = (429, TTL_EXPIRED) if up else (503, NO_ENDPOINTS)
            item.waiter.set_exception(Dropped(status, reason, (
                f"request dropped by flow control: it waited {self.clock() - item.arrived:.1f} s, past its TTL of "
                f"{self.ttl_s:g} s (default_request_ttl), in priority band {item.priority}, flow {item.flow!r}, "
                + ("while the pool stayed saturated" if up else "and the pool has no endpoint up"))))

    async def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            try:
                await self._dispatcher
            except (asyncio.CancelledError, Exception):
                pass
