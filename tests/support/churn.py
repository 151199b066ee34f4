"""Requests flowing through a testbed while a test changes its InferencePool, each one recorded.

:class:`BackgroundLoad` sends streaming chats from a few threads at a steady pace until it is stopped (or
its deadline passes) and keeps, per request, when it started and ended (``time.monotonic()``, the test's
clock), its status, the pod that answered (``x-inference-pod``) and, for a failure, its kind
(:func:`eppkit.workload.classify`). Each prompt starts differently, so a prefix-aware picker has no reason
to keep sending them to one pod.

The EPPs that watch a pool, as the churn tests and the bench start them: GAIE's EPP with its built-in
plugins, and the kit's EPP following the same pool (external-epp, :data:`KIT_EPP_CONTROLLER_COMMAND`).
"""

from __future__ import annotations

import ipaddress
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from eppkit.core.polling import poll
from eppkit.workload import classify, failure_detail
from tests.support.reliability import MODEL, topology

# The kit's EPP as a Kubernetes controller: its pool from the testbed's InferencePool, as GAIE's EPP learns it.
KIT_EPP_CONTROLLER_COMMAND = (f"{sys.executable} -m eppkit.services.epp --host 127.0.0.1 --port {{grpc_port}} "
                              "--kubeconfig {kubeconfig} --pool-namespace {pool_namespace} --pool-name {pool_name} "
                              "--metrics-interval 0.2")
WATCHERS = ("gaie-epp", "kit-epp")


def where_planned(bed, index: int, ip: str) -> bool:
    """The pod's IP is where the runtime planned pod ``index``; where the cluster's network places each Pod (a
    cluster of your own: eppkit.cluster.remote.LearnedPods), a real address, no longer the placeholder."""
    if bed.pod_addresses.learned:
        return ip != bed.pod_addresses.address(index) and bool(ipaddress.ip_address(ip))
    return ip == bed.pod_addresses.address(index)


def watcher_topology(watcher: str, vllm: tuple[str, ...]):
    """A testbed whose EPP watches its InferencePool: GAIE's (its built-in plugins) or the kit's."""
    if watcher == "gaie-epp":
        return topology("gaie-epp", vllm=vllm, conformance=False)
    if watcher == "kit-epp":
        return topology("external-epp", vllm=vllm, epp_command=KIT_EPP_CONTROLLER_COMMAND)
    raise ValueError(f"unknown watcher {watcher!r}; known: {', '.join(WATCHERS)}")


@dataclass(frozen=True)
class Sent:
    started: float  # time.monotonic() when the request was sent
    ended: float
    status: int
    pod: str | None  # the mock that answered
    error: str | None  # None: served in full
    detail: str | None = None  # a failure's own words (eppkit.workload.failure_detail: the client's error or the error body)

    @property
    def ok(self) -> bool:
        return self.error is None


class BackgroundLoad:
    """``workers`` threads, each sending one request after another (``pause_s`` between), for at most
    ``max_duration_s``; stopped by leaving the ``with``."""

    def __init__(self, bed, *, workers: int = 3, pause_s: float = 0.02, max_duration_s: float = 90.0,
                 request_timeout_s: float = 10.0, max_tokens: int = 4) -> None:
        self.bed = bed
        self.workers, self.pause_s = workers, pause_s
        self.max_duration_s, self.request_timeout_s, self.max_tokens = max_duration_s, request_timeout_s, max_tokens
        self._sent: list[Sent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counter = iter(range(10**9))
        self._threads: list[threading.Thread] = []
        self._client = None

    def _body(self) -> dict:
        with self._lock:
            n = next(self._counter)
        return {"model": MODEL, "max_tokens": self.max_tokens, "stream": True,
                "messages": [{"role": "user", "content": f"{n:06x} {n * 7919 % 104729} which pod answers?"}]}

    def _work(self) -> None:
        deadline = time.monotonic() + self.max_duration_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            result = self._client.chat(self._body(), timeout_s=self.request_timeout_s)
            error = classify(result, stream=True)
            sent = Sent(started, time.monotonic(), result.status, result.headers.get("x-inference-pod"), error,
                        failure_detail(result) if error else None)
            with self._lock:
                self._sent.append(sent)
            self._stop.wait(self.pause_s)

    def __enter__(self) -> "BackgroundLoad":
        self._client = self.bed.client(pool_size=self.workers)
        self._threads = [threading.Thread(target=self._work, name=f"churn-load-{i}", daemon=True)
                         for i in range(self.workers)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.request_timeout_s + 5)

    def sent(self, since: float = 0.0) -> list[Sent]:
        """Every finished request that started at ``since`` or later, in start order."""
        with self._lock:
            return sorted((s for s in self._sent if s.started >= since), key=lambda s: s.started)

    def wait_for(self, enough: Callable[[list[Sent]], bool], what: str, *, since: float = 0.0,
                 timeout_s: float = 30.0) -> list[Sent]:
        """Until ``enough(sent(since))`` (PollTimeout naming ``what`` and what was served otherwise)."""
        return poll(lambda: self.sent(since), enough, timeout_s=timeout_s, interval_s=0.05,
                    describe=lambda sent, _: f"{what}: not within {timeout_s:g} s; served so far: {served(sent or [])}")

    def wait_served(self, count: int, *, since: float = 0.0, timeout_s: float = 30.0) -> list[Sent]:
        return self.wait_for(lambda sent: sum(s.ok for s in sent) >= count, f"{count} requests served",
                             since=since, timeout_s=timeout_s)


def details(sent: list[Sent]) -> dict[str, int]:
    """How many failures said each thing (a failure's ``detail``)."""
    return dict(Counter(s.detail for s in sent if not s.ok))


def served(sent: list[Sent]) -> dict[str, int]:
    """How many requests each pod answered, failures by kind (``!<kind>``)."""
    return dict(Counter(s.pod if s.ok else f"!{s.error}" for s in sent))
