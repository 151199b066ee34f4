"""The endpoint pool the EPP picks from, and the scraper that keeps its load figures fresh.

Endpoints come from ``--endpoints`` as ``name=host:port`` (or bare ``host:port``, then the
address is the name). Load comes from each mock vLLM's Prometheus ``/metrics``
(``vllm:num_requests_waiting`` and ``vllm:num_requests_running``), scraped every
``--metrics-interval`` seconds. Between two scrapes the EPP counts its own picks per endpoint
so a burst does not all land on the endpoint that looked idle at the last scrape.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Iterable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("epp.pool")

WAITING_METRIC = "vllm:num_requests_waiting"
RUNNING_METRIC = "vllm:num_requests_running"


@dataclass
class PoolEndpoint:
    name: str
    host: str
    port: int
    models: tuple[str, ...] = ()  # empty: serves whatever model is asked for
    # Last scrape: None until the first one answered.
    waiting: float | None = None
    running: float | None = None
    # Picks sent to this endpoint since the last scrape (not yet visible in its metrics).
    picked_since_scrape: int = 0
    healthy: bool = True
    last_scrape: float | None = None  # time.monotonic() of the last successful scrape
    last_error: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def serves(self, model: str | None) -> bool:
        return not self.models or model is None or model in self.models

    @property
    def queue_depth(self) -> float:
        """Requests this endpoint holds as far as the EPP knows: waiting + running + unseen picks."""
        return (self.waiting or 0.0) + (self.running or 0.0) + self.picked_since_scrape

    def describe_load(self) -> str:
        if self.waiting is None and self.running is None:
            return f"no metrics, {self.picked_since_scrape} recent picks"
        return f"waiting={_fmt(self.waiting)} running={_fmt(self.running)} recent={self.picked_since_scrape}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def parse_endpoints(spec: str | Iterable[str]) -> list[PoolEndpoint]:
    """``"vllm-0=127.0.0.1:8001@mock-llm,127.0.0.1:8002"`` -> endpoints; ValueError on a bad item.

    Each item is ``[name=]host:port[@model[|model...]]``; without a model list the endpoint
    serves every model.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    endpoints: list[PoolEndpoint] = []
    seen: set[str] = set()
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, sep, address = item.partition("=")
        if not sep:
            name, address = "", item
        address, _, models = address.partition("@")
        name = name or address
        host, colon, port_text = address.rpartition(":")
        if not colon or not host or not port_text.isdigit():
            raise ValueError(f"endpoint {item!r} is not name=host:port or host:port")
        host = host.strip("[]")
        ep = PoolEndpoint(
            name=name.strip(),
            host=host,
            port=int(port_text),
            models=tuple(m.strip() for m in models.split("|") if m.strip()),
        )
        if ep.address in seen:
            raise ValueError(f"endpoint {ep.address} listed twice")
        seen.add(ep.address)
        endpoints.append(ep)
    return endpoints


def parse_metrics(text: str) -> dict[str, float]:
    """Sum every sample of each metric in Prometheus text format (labels are summed over; NaN skipped).

    A malformed exposition raises ValueError, as Prometheus fails such a scrape whole.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isnan(sample.value):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


class Pool:
    """The endpoints, their health and load, and lookups by name or address."""

    def __init__(self, endpoints: list[PoolEndpoint]):
        self.endpoints = endpoints

    def __len__(self) -> int:
        return len(self.endpoints)

    def healthy(self) -> list[PoolEndpoint]:
        return [ep for ep in self.endpoints if ep.healthy]

    def find(self, key: str) -> PoolEndpoint | None:
        """An endpoint by name (``vllm-1``) or by address (``127.0.0.1:8001``)."""
        key = key.strip()
        for ep in self.endpoints:
            if key in (ep.name, ep.address):
                return ep
        return None

    def note_pick(self, ep: PoolEndpoint) -> None:
        ep.picked_since_scrape += 1

    def record_scrape(self, ep: PoolEndpoint, metrics: dict[str, float] | None, error: str | None = None) -> None:
        """Apply one scrape result: metrics (or None when the endpoint has no /metrics) or an error."""
        if error is not None:
            if ep.healthy:
                log.warning("endpoint %s (%s) marked down: %s", ep.name, ep.address, error)
            ep.healthy = False
            ep.last_error = error
            return
        if not ep.healthy:
            log.info("endpoint %s (%s) is back", ep.name, ep.address)
        ep.healthy = True
        ep.last_error = None
        ep.last_scrape = time.monotonic()
        ep.picked_since_scrape = 0
        if metrics is not None:
            ep.waiting = metrics.get(WAITING_METRIC, ep.waiting)
            ep.running = metrics.get(RUNNING_METRIC, ep.running)


@dataclass
class MetricsScraper:
    """Scrapes every endpoint's ``/metrics`` on an interval; a refused connection marks it down."""

    pool: Pool
    interval_s: float = 0.5
    timeout_s: float = 1.0
    _task: asyncio.Task | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)

    async def start(self) -> None:
        if self.interval_s <= 0 or not self.pool.endpoints:
            return
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        await self.scrape_once()
        self._task = asyncio.create_task(self._loop(), name="epp-metrics-scraper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.scrape_once()
            except Exception:  # never let one bad scrape end the loop
                log.exception("metrics scrape failed")

    async def scrape_once(self) -> None:
        await asyncio.gather(*(self._scrape(ep) for ep in self.pool.endpoints))

    async def _scrape(self, ep: PoolEndpoint) -> None:
        assert self._session is not None
        url = f"http://{ep.address}/metrics"
        try:
            async with self._session.get(url) as resp:
                if resp.status == 404:
                    self.pool.record_scrape(ep, None)  # up, but no load figures
                    return
                if resp.status != 200:
                    self.pool.record_scrape(ep, None, error=f"GET /metrics answered {resp.status}")
                    return
                text = await resp.text()
        except asyncio.TimeoutError:
            # Slow is not down: a busy endpoint, or our own loop busy with a large body, answers
            # late. Marking it down here turned one 70 MB request into 503s for everybody after it.
            # Keep its health and its last load figures; a refused or reset connection marks it down.
            ep.last_error = f"GET {url}: no answer within {self.timeout_s:g} s (health unchanged)"
            log.info("endpoint %s (%s): metrics scrape timed out; health unchanged", ep.name, ep.address)
            return
        except (aiohttp.ClientError, OSError) as exc:
            self.pool.record_scrape(ep, None, error=f"GET {url}: {exc.__class__.__name__}: {exc}")
            return
        try:
            figures = parse_metrics(text)
        except ValueError as exc:  # answering, so up; but its figures cannot be trusted: keep the last ones
            ep.last_error = f"GET {url}: malformed metrics ({exc}); health unchanged"
            log.warning("endpoint %s (%s): malformed /metrics: %s", ep.name, ep.address, exc)
            return
        self.pool.record_scrape(ep, figures)
