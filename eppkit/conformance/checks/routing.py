"""Routing judged black-box: what EPPs are deployed for, each rule declared by the EPP (``--load-aware``; a rule it
does not take on is n/a). The pods' own words judge it: their ``/metrics`` as vLLM writes them (scraped by the
check) and the pod each answer names (the mock's ``x-inference-pod``), beside Envoy's record of where it sent
each request.

A check that cannot make its condition (a pod that would not get busy: its metrics do not show it) is not run,
never passed.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Self

import requests

from eppkit.conformance.checks.data_plane import NEEDS
from eppkit.conformance.checks.registry import (
    DATA_PLANE,
    NOT_RUN,
    SHOULD,
    Result,
    check,
    evidence_of,
    judged,
    not_applicable,
)
from eppkit.observability.client import PROTOCOLS
from eppkit.services.picker.scraper import parse_metrics
from eppkit.services.vllm.request_in import HEADER_ITL

LOAD_SOURCE = "GAIE's queue and KV-cache-utilization scorers, llm-d-router's load-aware scorer (vLLM's /metrics)"
RUNNING, WAITING, KV_USAGE = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
LOAD_METRICS = frozenset((RUNNING, WAITING, KV_USAGE))
MAX_SEQS = 4  # each pod's --max-num-seqs in this check's testbed: requests beyond it wait, as on vLLM
KV_BLOCKS = 256  # each pod's KV cache (blocks of 16 tokens): the busy pod's running streams fill much of it
BUSY_STREAMS = 8  # long streamed requests straight to the busy pod: MAX_SEQS running, the rest waiting
BUSY_WORDS, BUSY_TOKENS, BUSY_ITL_MS = 200, 500, 20  # each at most 10 s of tokens; ended once the probes are sent
BUSY_WITHIN_S = 5.0  # the busy pod's /metrics must show it busy within this, else the check is not run
SCRAPE_S = 1.0  # then, time for the EPP to scrape it (the kit's EPP scrapes every 0.2 s, GAIE's every 0.05 s)
PROBES, PROBE_GAP_S = 20, 0.1  # new requests through Envoy, one every 0.1 s
SHARE = 0.8  # at least this share of them go to the other pods


def _load_aware(target) -> str | None:
    if target is not None and getattr(target, "load_aware", False):
        return None
    return ("the EPP does not say it is load-aware (--load-aware): where it sends a request is not judged by the "
            "pods' load")


def scrape(address: str) -> dict[str, float]:
    """A pod's running and waiting requests and KV-cache usage, from its ``/metrics`` (vLLM's names)."""
    answer = requests.get(f"http://{address}/metrics", timeout=2)
    answer.raise_for_status()
    return parse_metrics(answer.text, only=LOAD_METRICS)


def load_words(metrics: dict[str, float]) -> str:
    return (f"{RUNNING} {metrics.get(RUNNING, 0):g}, {WAITING} {metrics.get(WAITING, 0):g}, "
            f"{KV_USAGE} {metrics.get(KV_USAGE, 0):.2f}")


def busy(metrics: dict[str, float]) -> bool:
    """Requests running and more waiting, and KV-cache blocks in use: the pod is busy in its own words."""
    return metrics.get(RUNNING, 0) >= 1 and metrics.get(WAITING, 0) >= 1 and metrics.get(KV_USAGE, 0) > 0


class BusyLoad:
    """``BUSY_STREAMS`` long streamed chat requests written straight to one pod (past Envoy and the EPP, as another
    client of the pod would), each on a socket of its own that is never read: the pod runs and queues them until
    :meth:`close` drops the connections (the pod then stops them at its next token). Loopback only."""

    def __init__(self, address: str, model: str):
        host, _, port = address.rpartition(":")
        if not host.startswith("127."):
            raise ValueError(f"the busy pod {address} is not on loopback")
        self.address = (host, int(port))
        prompt = " ".join(f"busy{i}" for i in range(BUSY_WORDS))
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": BUSY_TOKENS, "stream": True}).encode()
        self.request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
                        f"{HEADER_ITL}: {BUSY_ITL_MS}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                        ).encode() + body
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> Self:
        try:
            for _ in range(BUSY_STREAMS):
                sock = socket.create_connection(self.address, timeout=2)
                self.sockets.append(sock)
                sock.sendall(self.request)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass
        self.sockets.clear()

    def __exit__(self, *_exc) -> None:
        self.close()


def _until_busy(address: str) -> dict[str, float]:
    """The pod's load once its /metrics shows it busy, or the last it showed after ``BUSY_WITHIN_S``."""
    deadline = time.monotonic() + BUSY_WITHIN_S
    while True:
        metrics = scrape(address)
        if busy(metrics) or time.monotonic() >= deadline:
            return metrics
        time.sleep(0.05)


@check("load-aware", "a load-aware EPP keeps new requests away from a busy pod", category=DATA_PLANE, level=SHOULD,
       source=LOAD_SOURCE, needs=NEEDS, per_protocol=False, declared=_load_aware)
def load_aware(h):
    """For an EPP that says it routes by load (``--load-aware``; it reads the pods' ``/metrics``): one of three
    pods (each running at most 4 requests at once, 256 KV-cache blocks) made busy for real, with 8 long streamed
    requests sent straight to it; once its ``/metrics`` shows requests running and waiting and KV-cache blocks in
    use (``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``), and a second
    for the EPP to scrape it, 20 new requests through Envoy, one every 0.1 s, HTTP/1.1 and h2c in turn: at least 80 %
    of them are served by the other pods (the pod each answer names). The busy pod's metrics before and after the
    requests are in the evidence; a pod that would not get busy, or stopped being busy before the last request was
    sent, leaves the check not run. Then the busy streams are dropped and every request is served."""
    base = h.target.topology()
    pods = [dataclasses.replace(v, extra_args=[*v.extra_args, "--max-num-seqs", str(MAX_SEQS),
                                               "--kv-cache-size", str(KV_BLOCKS)]) for v in base.vllm]
    bed = h.bed("load-aware", topology=dataclasses.replace(base, vllm=pods))
    if len(bed.backends) < 2:
        return not_applicable("the check needs two pods or more: the target's topology has fewer")
    target, others = bed.backends[0], bed.backends[1:]
    if not target.address.startswith("127."):
        return not_applicable(f"{target.name}'s address {target.address} is not on loopback: the check sends its "
                              "busy load straight to a pod only there")
    evidence = [f"{ep.name}'s /metrics at the start: {load_words(scrape(ep.address))}" for ep in bed.backends]
    with BusyLoad(target.address, target.model) as load:
        before = _until_busy(target.address)
        evidence.append(f"{BUSY_STREAMS} streamed requests of {BUSY_TOKENS} tokens ({BUSY_ITL_MS} ms apart) sent "
                        f"straight to {target.name} ({target.address}); its /metrics then: {load_words(before)}")
        if not busy(before):
            return Result(NOT_RUN, f"{target.name} would not get busy: its /metrics showed {load_words(before)} "
                          f"{BUSY_WITHIN_S:g} s after {BUSY_STREAMS} long requests were sent to it", evidence)
        time.sleep(SCRAPE_S)
        with ThreadPoolExecutor(max_workers=PROBES) as pool:
            futures = []
            for i in range(PROBES):
                futures.append(pool.submit(_probe, h, bed, PROTOCOLS[i % len(PROTOCOLS)]))
                time.sleep(PROBE_GAP_S)
            after = scrape(target.address)
            evidence.append(f"{target.name}'s /metrics after the last request was sent: {load_words(after)}")
            load.close()  # its streams dropped: a request queued behind them is served now
            sents = [f.result() for f in futures]
    if not busy(after):
        return Result(NOT_RUN, f"{target.name} stopped being busy before the last request was sent (its /metrics: "
                      f"{load_words(after)})", evidence)
    for i, sent in enumerate(sents):
        h.must_serve(sent, f"request {i + 1} of {PROBES} while {target.name} was busy")
    names = {ep.address: ep.name for ep in bed.backends}
    went = [sent.served_by for sent in sents]
    counts = {ep.name: went.count(ep.name) for ep in bed.backends}
    evidence.append(f"where the {PROBES} requests went, in order (the pod each answer named): {', '.join(went)}; "
                    f"per pod {counts}")
    evidence += [f"request {i + 1} ({s.protocol}): Envoy sent it to {names.get(s.hop['upstream'], s.hop['upstream'])}"
                 f"; {evidence_of(s.hop)}" for i, s in enumerate(sents) if s.served_by == target.name]
    elsewhere = sum(1 for pod in went if pod != target.name)
    share = elsewhere / PROBES
    problems = [] if share >= SHARE else [(
        f"{PROBES - elsewhere} of {PROBES} went to {target.name} while its /metrics showed {load_words(before)}: "
        f"{share:.0%} went to the other pods ({', '.join(ep.name for ep in others)}), under {SHARE:.0%}")]
    return judged(problems, evidence, failing="new requests went to the busy pod",
                  passing=f"{elsewhere} of {PROBES} new requests ({share:.0%}) went to the other pods while "
                          f"{target.name} was busy ({load_words(before)})",
                  fix=f"Score the pods by the load their /metrics show ({WAITING}, {RUNNING}, {KV_USAGE}) and send "
                      "new requests to the least loaded")


def _probe(h, bed, protocol: str):
    h.protocol = protocol  # this thread's client protocol (the harness keeps it per thread)
    return h.send(bed)
