"""The pick: the endpoint with the fewest requests in flight (ties in pool order), the rest as fallbacks."""

from __future__ import annotations

import threading


class NoEndpoint(Exception):
    pass


class LeastLoaded:
    def __init__(self, endpoints: list[str], max_fallbacks: int = 2):
        self.endpoints = endpoints
        self.max_fallbacks = max_fallbacks
        self.in_flight = {ep: 0 for ep in endpoints}
        self._lock = threading.Lock()

    def pick(self, subset: list[str] | None = None, forced: list[str] | None = None) -> list[str]:
        """The primary and its fallbacks; ``forced``: GAIE's test header (its order wins); NoEndpoint if none fits."""
        allowed = [ep for ep in self.endpoints if subset is None or ep in subset]
        with self._lock:
            if forced:
                chosen = [ep for ep in forced if ep in allowed]
            else:
                chosen = sorted(allowed, key=lambda ep: self.in_flight[ep])[: 1 + self.max_fallbacks]
            if not chosen:
                raise NoEndpoint(f"no endpoint fits (subset {subset}, forced {forced})")
            self.in_flight[chosen[0]] += 1
        return chosen

    def done(self, endpoint: str) -> None:
        with self._lock:
            self.in_flight[endpoint] = max(0, self.in_flight[endpoint] - 1)
