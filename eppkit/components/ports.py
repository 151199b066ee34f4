"""Free loopback ports for a testbed's components, never handed to two holders at once on this machine.

Checking that a port is free (a bind that succeeds) is not enough when several processes pick
ports at once — pytest-xdist workers, two sessions, an ``eppkit up`` beside a test run: between
one process's check and its service's own bind, another can check the same port and find it
free too. So every port handed out is first **leased**: an exclusive ``flock`` on
``<leases>/<port>.lock`` (:func:`eppkit.core.paths.port_leases_dir`, machine-wide), taken with
the `filelock` library before the bind check and held until :meth:`PortAllocator.release` (a
testbed's stop) or the holder's end — the kernel drops the locks of a process that dies, so a
crashed worker leaks no lease. An allocator skips every port another holder leases; two
allocators therefore never hand out the same port, by construction, whatever the worker count.

Ports come from *below* the kernel's ephemeral range (:func:`port_range`): a port the kernel hands
out for some outgoing connection's source port would make our service's bind fail; ports outside
that range are never handed out that way. Programs that are not eppkit's and bind a fixed port are
what the bind check is still there for. A Kubernetes node's own fixed ports in that range (:data:`NODE_PORTS`: the
kubelet's, kube-proxy's, the controller manager's and the scheduler's) are never handed out: on a cluster of your
own the kit's Pods bind the ports leased here on a node whose listeners this machine cannot check.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

from filelock import FileLock, Timeout

from eppkit.core import procfs
from eppkit.core.paths import port_leases_dir

TRIES = 200
# kubelet healthz 10248, kube-proxy metrics 10249, kubelet 10250, kubelet read-only 10255, kube-proxy health 10256,
# kube-controller-manager 10257, kube-scheduler 10259
NODE_PORTS = frozenset({10248, 10249, 10250, 10255, 10256, 10257, 10259})


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _ephemeral_range() -> tuple[int, int]:
    return procfs.local_port_range() or (32768, 60999)


def port_range() -> tuple[int, int]:
    """12,000 ports below the 12,000 just under the kernel's ephemeral range ([8768, 20767] with Linux's
    default 32768-60999). The 12,000 just under it are where eppkit picked before ports were leased:
    a process of such an older eppkit on the same machine (another checkout's test run) knows no lease,
    so the leased ports keep out of its way."""
    low, _ = _ephemeral_range()
    if low >= 26000:
        return low - 24000, low - 12001
    return (max(1024, low - 12000), max(2048, low - 1)) if low > 3072 else (20000, 30000)


class PortAllocator:
    """Hands out free loopback ports, each leased machine-wide until :meth:`release` (see the module docstring)."""

    def __init__(self, rng: random.Random | None = None, *, leases: Path | None = None) -> None:
        self._given: set[int] = set()
        self._leases: list[FileLock] = []
        self._lock = threading.Lock()  # a testbed starts its control plane in a thread of its own
        self._rng = rng or random.Random()
        self._lease_dir = Path(leases) if leases is not None else port_leases_dir()
        self._range = port_range()

    def shared_port(self, hosts: list[str]) -> int:
        """One port free on every address of ``hosts`` (pods of an InferencePool share a target port)."""
        return self._pick(hosts, f"no port free on all of {hosts} in {self._range} after {TRIES} tries")

    def port(self, *, all_interfaces: bool = False) -> int:
        """A free loopback port; ``all_interfaces``: free on 0.0.0.0 too (for a server that cannot be
        told to bind loopback only, such as llm-d-inference-sim)."""
        hosts = ["0.0.0.0" if all_interfaces else "127.0.0.1"]
        return self._pick(hosts, f"no free loopback port in {self._range} after {TRIES} tries")

    @property
    def given(self) -> frozenset[int]:
        """The ports this allocator holds."""
        return frozenset(self._given)

    def release(self) -> None:
        """Give every lease back (after the services on these ports have stopped)."""
        with self._lock:
            leases, self._leases = self._leases, []
            self._given.clear()
        for lease in leases:
            lease.release(force=True)

    def _pick(self, hosts: list[str], failure: str) -> int:
        with self._lock:
            for _ in range(TRIES):
                port = self._rng.randint(*self._range)
                if self._take(port, hosts):
                    return port
        raise RuntimeError(f"{failure} (leases in {self._lease_dir})")

    def _take(self, port: int, hosts: list[str]) -> bool:
        """Lease ``port`` if no one holds it and it is free on every host (with ``_lock`` held)."""
        if port in self._given or port in NODE_PORTS:
            return False
        lease = FileLock(self._lease_dir / f"{port}.lock", timeout=0, thread_local=False, mode=0o666)
        try:
            lease.acquire()
        except (Timeout, OSError):  # held by another process (or a file of another user's we cannot open)
            return False
        # Leased first, checked second: no other eppkit process can pass this check for this port now.
        if not all(_free(host, port) for host in hosts):
            lease.release(force=True)
            return False
        self._given.add(port)
        self._leases.append(lease)
        return True
