"""The pick: the endpoint with the fewest requests in flight (ties in pool order), the rest as fallbacks."""

from __future__ import annotations

import socket
import threading

PROBE_TIMEOUT_S = 0.2  # a subset's pod that does not accept a connection within this is down: not eligible


def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """The pod at ``address`` (host:port) accepts a TCP connection."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    return True


class NoEndpoint(Exception):
    pass


class LeastLoaded:
    def __init__(self, endpoints: list[str], max_fallbacks: int = 2):
        self.endpoints = endpoints
        self.max_fallbacks = max_fallbacks
        self.in_flight = {ep: 0 for ep in endpoints}
        self._lock = threading.Lock()

    def pick(self, subset: list[str] | None = None, forced: list[str] | None = None) -> list[str]:
        """The primary and its fallbacks; ``forced``: GAIE's test header (its order wins); NoEndpoint if none fits.
        With a subset hint only its pods that are up are eligible (the protocol: an empty or ineligible subset is a
        503): each is probed with a connection, as this example keeps no health state of its own."""
        allowed = [ep for ep in self.endpoints if subset is None or (ep in subset and answers(ep))]
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
