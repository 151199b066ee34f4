"""The pods in their own words, for the routing checks: their ``/metrics`` as vLLM writes them (scraped here), load
sent straight to them (past Envoy and the EPP, as another client of the pod would), and a request through Envoy
while they carry it (:mod:`eppkit.conformance.held` holds them so for :mod:`eppkit.conformance.checks.routing` and
:mod:`eppkit.conformance.checks.saturation`)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self, TypeVar

import requests

from eppkit.cluster.podnet import SUBNET as KIT_POD_NETWORK
from eppkit.services.picker.scraper import parse_metrics
from eppkit.services.vllm.request_in import HEADER_ITL

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

T = TypeVar("T")

RUNNING, WAITING, KV_USAGE = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
LOAD_METRICS = frozenset((RUNNING, WAITING, KV_USAGE))
BUSY_STREAMS = 8  # long streamed requests straight to the busy pod: its --max-num-seqs running, the rest waiting
BUSY_WORDS, BUSY_TOKENS, BUSY_ITL_MS = 200, 500, 20  # each at most 10 s of tokens; ended once the probes are sent
BUSY_WITHIN_S = 5.0  # the busy pod's /metrics must show it busy within this, else the check is not run
SCRAPE_S = 1.0  # then, time for the EPP to scrape it (the kit's EPP scrapes every 0.2 s, GAIE's every 0.05 s)
PROBE_GAP_S = 0.1  # new requests through Envoy, one every 0.1 s


def reachable(address: str) -> bool:
    """Whether the checks may send load straight to the pod at ``address``: on loopback, or on the pod network the kit
    made on this machine (its one-node cluster's bridge), never another network's address."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip in KIT_POD_NETWORK


WHERE = "neither on loopback nor on the kit's own pod network"


def off_network(pods: Iterable[Any]) -> str | None:
    """Why a check cannot send its load straight to one of ``pods`` (testbed backends), or None: it can to each."""
    off = [ep for ep in pods if not reachable(ep.address)]
    if not off:
        return None
    return f"{off[0].name}'s address {off[0].address} is {WHERE}: the check sends its load straight to a pod only there"


def metrics_text(address: str) -> str:
    """A pod's ``/metrics`` exposition."""
    answer = requests.get(f"http://{address}/metrics", timeout=2)
    answer.raise_for_status()
    return answer.text


def until(read: Callable[[], T], shows: Callable[[T], bool], within_s: float) -> T:
    """What ``read`` gives once it ``shows`` the state wanted, or the last it gave after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        seen = read()
        if shows(seen) or time.monotonic() >= deadline:
            return seen
        time.sleep(0.05)


def scrape(address: str) -> dict[str, float]:
    """A pod's running and waiting requests and KV-cache usage, from its ``/metrics`` (vLLM's names)."""
    return parse_metrics(metrics_text(address), only=LOAD_METRICS)


def load_words(metrics: dict[str, float]) -> str:
    return (f"{RUNNING} {metrics.get(RUNNING, 0):g}, {WAITING} {metrics.get(WAITING, 0):g}, "
            f"{KV_USAGE} {metrics.get(KV_USAGE, 0):.2f}")


class BusyLoad:
    """``streams`` long streamed chat requests for ``model`` written straight to one pod (past Envoy and the EPP, as
    another client of the pod would), each on a socket of its own that is never read: the pod runs and queues them until
    :meth:`close` drops the connections (the pod then stops them at its next token). Only to a pod :func:`reachable`."""

    def __init__(self, address: str, model: str, streams: int = BUSY_STREAMS):
        host, _, port = address.rpartition(":")
        if not reachable(address):
            raise ValueError(f"the busy pod {address} is {WHERE}")
        self.address = (host, int(port))
        prompt = " ".join(f"busy{i}" for i in range(BUSY_WORDS))
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": BUSY_TOKENS, "stream": True}).encode()
        self.request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
                        f"{HEADER_ITL}: {BUSY_ITL_MS}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                        ).encode() + body
        self.sockets: list[socket.socket] = []
        self.streams = streams

    def __enter__(self) -> Self:
        try:
            for _ in range(self.streams):
                sock = socket.create_connection(self.address, timeout=2)
                self.sockets.append(sock)
                sock.sendall(self.request)
        except BaseException:
            self.close()
            raise
        return self

    def free_one(self) -> bool:
        """Drop the oldest stream still open (the one the pod runs, its requests being first come first served): one
        slot freed; False when none is left."""
        if not self.sockets:
            return False
        sock = self.sockets.pop(0)
        try:
            sock.close()
        except OSError:
            pass
        return True

    def close(self) -> None:
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass
        self.sockets.clear()

    def __exit__(self, *_exc) -> None:
        self.close()


def with_pod_args(topology, *args: str):
    """``topology`` with ``args`` added to each pod's command line (a check's own testbed: ``--max-num-seqs 4``)."""
    pods = [dataclasses.replace(v, extra_args=[*v.extra_args, *args]) for v in topology.vllm]
    return dataclasses.replace(topology, vllm=pods)


def probe(h: EppHarness, bed, protocol: str, model: str | None = None, headers: dict[str, str] | None = None,
          client=None):
    """One request through Envoy in ``protocol`` (for ``model``, with ``headers``; ``client``: the testbed's, fetched
    before, so that a check beside the others never waits for the harness while another starts a testbed) and
    Envoy's record of it."""
    h = h.on(protocol)
    if model is None:
        return h.send(bed, headers=headers, client=client)
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2}
    return h.send(bed, raw_body=json.dumps(body).encode(), headers=headers, client=client)
