"""Keeps a pool's load and health fresh: every endpoint's ``/metrics``, on an interval.

A refused or reset connection marks an endpoint down; an answer brings it back. Load is
``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` (summed over labels), or the
names the pool is given (``--waiting-metric`` / ``--running-metric``); the LoRA adapters are
``vllm:lora_requests_info``'s latest series.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field

import aiohttp
from eppkit.services.openai_server.lora_info import NAME as LORA_FAMILY
from eppkit.services.openai_server.lora_info import LoraInfo
from eppkit.services.openai_server.metrics import NAME_PARAM
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.pool import Pool
from prometheus_client.parser import text_string_to_metric_families

from eppkit.core.tasks import stop_tasks

log = logging.getLogger("picker.scraper")


def parse_metrics(text: str, only: frozenset[str] | None = None) -> dict[str, float]:
    """Sum every sample of each metric in Prometheus text format (labels are summed over; NaN skipped).

    ``only``: the sample names wanted; the other lines (and the comments) are dropped before parsing. A vLLM's
    exposition is some 550 lines of histograms, 7 ms of parsing on the picker's loop per endpoint and scrape,
    which a request arriving meanwhile waits out; the two load gauges are a few lines.
    A malformed exposition (of the lines parsed) raises ValueError, as Prometheus fails such a scrape whole.
    """
    if only is not None:
        text = "\n".join(line for line in text.splitlines() if _sample_name(line) in only)
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isnan(sample.value):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def _sample_name(line: str) -> str:
    """The metric name a sample line starts with ("" for a comment or a blank line)."""
    if not line or line[0] == "#":
        return ""
    end = len(line)
    for stop in ("{", " ", "\t"):
        at = line.find(stop)
        if 0 <= at < end:
            end = at
    return line[:end]


@dataclass
class MetricsScraper:
    """Scrapes every endpoint's ``/metrics`` every ``interval_s``; 0 turns scraping (and health) off."""

    pool: Pool
    interval_s: float = 0.5
    timeout_s: float = 1.0
    keep_when_empty: bool = False  # scrape a pool that starts empty too (one learned from Kubernetes grows later)
    _task: asyncio.Task | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)

    async def start(self) -> None:
        if self.interval_s <= 0 or not (self.pool.endpoints or self.keep_when_empty):
            return
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        await self.scrape_once()
        self._task = asyncio.create_task(self._loop(), name="picker-metrics-scraper")

    async def stop(self) -> None:
        for exc in await stop_tasks(self._task):
            log.warning("the metrics scrape loop had ended: %s", exc)
        self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def _names(self) -> list[str]:
        """The samples a scrape asks for (``?name[]=``, which prometheus_client's exposition serves, vLLM's and the
        mock's among them: three gauges' lines instead of some 550 lines of histograms, 45 KB rendered and read
        every interval; an exposition that ignores it serves them all, and :func:`parse_metrics` picks them)."""
        return sorted(self.pool.read_metrics | {LORA_FAMILY})

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
            async with self._session.get(url, params=[(NAME_PARAM, n) for n in self._names]) as resp:
                if resp.status == 404:
                    self.pool.record_scrape(ep, {})  # up, but no load figures (the pool warns once)
                    return
                if resp.status != 200:
                    self.pool.record_scrape(ep, None, error=f"GET /metrics answered {resp.status}")
                    return
                text = await resp.text()
            if not all(f"\n{name}" in f"\n{text}" for name in self.pool.load_metrics):  # a load metric is not
                # among those it served: all of them, which the pool's warning names
                async with self._session.get(url) as resp:
                    text = await resp.text() if resp.status == 200 else text
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
            figures = parse_metrics(text, self.pool.read_metrics)
            if not self.pool.load_metrics <= figures.keys():  # lacking a load metric: all of them, for the warning
                figures = parse_metrics(text)
        except ValueError as exc:  # answering, so up; but its figures cannot be trusted: keep the last ones
            ep.last_error = f"GET {url}: malformed metrics ({exc}); health unchanged"
            log.warning("endpoint %s (%s): malformed /metrics: %s", ep.name, ep.address, exc)
            return
        self.pool.record_scrape(ep, figures)
        ep.lora = LoraInfo.parse(text)  # its LoRA adapters (the lora-affinity scorer reads them)
