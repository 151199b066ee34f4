"""The echo EPP's flow control (``--flow-control``): the kit's queue (:mod:`eppkit.services.picker.flow_control`) fed
with what the echo EPP knows, and its faults, each breaking one rule of the flow-control checks.

The echo EPP reads no control plane: an InferenceObjective's priority is given by flag (``--priorities
eppkit-high=10,eppkit-low=0``; an objective not named: 0). It scrapes its pool's ``/metrics`` for saturation (GAIE's
utilization detector, its default thresholds) and counts its own picks since each scrape, as the kit's picker does.

| fault | what the queue then does |
|---|---|
| ``no-queue`` | sheds (429) a request that arrives while the pool is saturated, instead of queueing it |
| ``fifo-bands`` | puts every request in one band: the priority is ignored |
| ``one-flow`` | puts every request of a band in one flow: the fairness id is ignored |
| ``ttl-never`` | never drops a request: it waits until the pool has room, however long |
"""

from __future__ import annotations

from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.flow_control import DEFAULT_FLOW, DROPPED_REASON, SATURATED, Dropped, FlowController, \
    fairness_id
from eppkit.services.picker.headers import OBJECTIVE
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.saturation import Saturation
from eppkit.services.picker.scraper import MetricsScraper

FAULTS = ("no-queue", "fifo-bands", "one-flow", "ttl-never")
NEVER_S = 10 * 365 * 24 * 3600.0  # ttl-never's TTL
SCRAPE_EVERY_S = 0.2


def parse_priorities(text: str) -> dict[str, int]:
    """``name=priority,...`` -> {name: priority}; ValueError naming a bad entry."""
    out: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise ValueError(f"--priorities: {item!r} is not name=priority") from None
        if not sep or not name.strip():
            raise ValueError(f"--priorities: {item!r} is not name=priority")
    return out


class EchoQueue:
    """Holds a request while the pool is saturated (:meth:`admit`), with one fault of :data:`FAULTS` or none."""

    def __init__(self, endpoints: str, *, priorities: dict[str, int], ttl_s: float, misbehave: str = "none"):
        self.pool = Pool(parse_endpoints(endpoints))
        self.scraper = MetricsScraper(self.pool, interval_s=SCRAPE_EVERY_S)
        self.saturation = Saturation()
        self.priorities, self.misbehave = priorities, misbehave
        self.flow = FlowController(self.saturated, lambda: bool(self.pool.healthy()),
                                   ttl_s=NEVER_S if misbehave == "ttl-never" else ttl_s)

    def saturated(self, *, picked: bool = True) -> bool:
        """The pool saturated; ``picked``: its picks since each scrape counted as waiting (the queue's view)."""
        return self.saturation.of(self.pool.healthy(), picked=picked) >= 1.0

    async def admit(self, request_headers: dict[str, str]) -> dict[str, str] | None:
        """None once the request may go on; raises :class:`Dropped` when it is dropped (its reason header:
        :func:`dropped_headers`)."""
        if self.misbehave == "no-queue":  # saturated as the pods' /metrics say (a burst of its own picks sheds nothing)
            if self.saturated(picked=False):
                raise Dropped(429, SATURATED, "request shed: the pool is saturated (the echo EPP, no-queue)")
            return None
        priority = 0 if self.misbehave == "fifo-bands" else self.priorities.get(request_headers.get(OBJECTIVE, ""), 0)
        flow = DEFAULT_FLOW if self.misbehave == "one-flow" else fairness_id(request_headers)
        await self.flow.admit(priority, flow)
        return None

    def picked(self, address: str) -> None:
        """A request sent to ``address``: counted as waiting there until the next scrape."""
        ep = self.pool.find(address)
        if ep is not None:
            self.pool.note_pick(ep)

    async def start(self) -> None:
        await self.scraper.start()

    async def stop(self) -> None:
        await self.flow.close()
        await self.scraper.stop()


def dropped_headers(exc: Dropped) -> list[tuple[str, str]]:
    return [(DROPPED_REASON, exc.reason)]
