"""Free loopback ports for a testbed's components."""

from __future__ import annotations

import random
import socket
import threading


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


class PortAllocator:
    """Hands out free loopback ports, never the same one twice in a testbed.

    Ports come from *below* the kernel's ephemeral range: a port the kernel handed us with
    bind(0) and we released can be given to some outgoing connection's source port before
    our service binds it ("address already in use"); ports outside that range never are.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._given: set[int] = set()
        self._rng = rng or random.Random()
        self._lock = threading.Lock()  # a testbed starts its control plane in a thread of its own
        low, _ = _ephemeral_range()
        self._range = (max(1024, low - 12000), max(2048, low - 1)) if low > 3072 else (20000, 30000)

    def shared_port(self, hosts: list[str]) -> int:
        """One port free on every address of ``hosts`` (pods of an InferencePool share a target port)."""
        for _ in range(200):
            port = self.port()
            if all(_free(host, port) for host in hosts):
                return port
        raise RuntimeError(f"no port free on all of {hosts} after 200 tries")

    def port(self, *, all_interfaces: bool = False) -> int:
        """A free loopback port; ``all_interfaces``: free on 0.0.0.0 too (for a server that cannot be
        told to bind loopback only, such as llm-d-inference-sim)."""
        with self._lock:
            for _ in range(200):
                port = self._rng.randint(*self._range)
                if port in self._given:
                    continue
                if not _free("0.0.0.0" if all_interfaces else "127.0.0.1", port):
                    continue
                self._given.add(port)
                return port
        raise RuntimeError(f"no free loopback port in {self._range} after 200 tries")
