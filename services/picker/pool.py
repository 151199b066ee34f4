"""The endpoints a picker chooses from, their health and load, and lookups by name or address.

Load comes from each endpoint's Prometheus ``/metrics`` (:mod:`eppkit.services.picker.scraper`).
Between two scrapes the picker counts its own picks per endpoint, so a burst does not all land
on the endpoint that looked idle at the last scrape.
"""

from __future__ import annotations

import logging
import time

from eppkit.services.picker.endpoints import PoolEndpoint

log = logging.getLogger("picker.pool")

WAITING_METRIC = "vllm:num_requests_waiting"
RUNNING_METRIC = "vllm:num_requests_running"
KV_USAGE_METRIC = "vllm:kv_cache_usage_perc"  # read for saturation (services/picker/saturation.py); optional


class Pool:
    def __init__(self, endpoints: list[PoolEndpoint], *, waiting_metric: str = WAITING_METRIC,
                 running_metric: str = RUNNING_METRIC):
        self.endpoints = endpoints
        self.waiting_metric = waiting_metric
        self.running_metric = running_metric
        self.load_metrics = frozenset((waiting_metric, running_metric))  # what a scrape needs of /metrics
        self.read_metrics = self.load_metrics | {KV_USAGE_METRIC}  # what a scrape reads of it
        self._unloaded: set[str] = set()  # endpoints already warned about: their /metrics lacks the load

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

    def match(self, key: str) -> list[PoolEndpoint]:
        """The endpoints ``key`` names: one by name or address, or every endpoint on a host given
        as a bare IP (``127.0.0.2``, as the GAIE test header names pods), in pool order."""
        found = self.find(key)
        if found is not None:
            return [found]
        host = key.strip().strip("[]")
        return [ep for ep in self.endpoints if ep.host == host]

    def describe_down(self) -> str:
        """Why nothing can serve: ``the pool is empty`` or each endpoint with its last error."""
        if not self.endpoints:
            return "the pool is empty"
        return "all endpoints are down: " + "; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.endpoints)

    def names(self) -> str:
        return ", ".join(ep.name for ep in self.endpoints) or "empty pool"

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
            ep.waiting = metrics.get(self.waiting_metric, ep.waiting)
            ep.running = metrics.get(self.running_metric, ep.running)
            ep.kv_usage = metrics.get(KV_USAGE_METRIC, ep.kv_usage)
            self._check_load_names(ep, metrics)

    def _check_load_names(self, ep: PoolEndpoint, metrics: dict[str, float]) -> None:
        """Warn once per endpoint whose /metrics lacks the load metrics: a scorer then sees it idle."""
        lacking = [n for n in (self.waiting_metric, self.running_metric) if n not in metrics]
        if not lacking:
            self._unloaded.discard(ep.name)
            return
        if ep.name in self._unloaded:
            return
        self._unloaded.add(ep.name)
        listed = ", ".join(sorted(metrics)[:8]) or "nothing"
        log.warning("endpoint %s (%s): its /metrics has no %s, so its load counts as 0 to the scorers; it lists %s%s. "
                    "Name the right metrics with --waiting-metric / --running-metric (mode options "
                    "waiting_metric / running_metric).", ep.name, ep.address, " or ".join(lacking), listed,
                    ", ..." if len(metrics) > 8 else "")
