"""Pods held in a state by load sent straight to them, and requests through Envoy meanwhile: what the routing checks
(:mod:`eppkit.conformance.checks.routing`, :mod:`eppkit.conformance.checks.saturation`) share. A check says which
pods it loads, the state it waits for in their own words (:class:`State`) and the requests it sends; it keeps only
its rule, what those requests must show. Pods that would not reach the state, or left it before the last request
was sent, or a request sent only once the load was dropped, leave the check not run, never passed."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from eppkit.conformance.pods import PROBE_GAP_S, SCRAPE_S, BusyLoad, probe, until
from eppkit.conformance.results import NOT_RUN, Result, evidence_of
from eppkit.observability.client import PROTOCOLS

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

K, T = TypeVar("K"), TypeVar("T")


@dataclasses.dataclass(frozen=True)
class State(Generic[K, T]):
    """A state a check holds pods in, as each pod's ``/metrics`` shows it. A pod is known by the check's key (its name,
    or the adapter made to run on it); ``{key}`` in the phrases is filled with it."""

    read: Callable[[str], T]  # a pod's address -> its reading (scraped from its /metrics)
    shows: Callable[[T, K], bool]  # (reading, key) -> the pod is in the state
    words: Callable[[T], str]  # a reading, for the evidence
    load: str  # the load sent to each pod: "8 long streamed requests", "2 streamed requests for {key}"
    becomes: str  # what a pod would not do: "get busy", "run {key} with room to spare"
    being: str  # what it stopped: "being busy", "running {key}"
    within_s: float  # how long each pod may take to show the state
    note: str = ""  # after the reason a pod would not: the thresholds, ...


@dataclasses.dataclass
class Held(Generic[K, T]):
    """What :func:`hold` saw: each pod's reading (by key) once it showed the state (or the last after the wait) and
    after the last request was sent; the requests' Sents in order; the evidence of both readings; ``not_run``: the
    check's result when the pods were not held in the state while every request was sent, else None."""

    before: dict[K, T]
    evidence: list[str]
    not_run: Result | None = None
    after: dict[K, T] = dataclasses.field(default_factory=dict)
    sents: list = dataclasses.field(default_factory=list)


def hold(h: EppHarness, bed, state: State[K, T], pods: dict[K, tuple[Any, BusyLoad]], asks: list[dict[str, Any]],
         evidence: list[str]) -> Held[K, T]:
    """Requests through Envoy while ``pods`` (key -> a testbed backend and the load sent straight to it) are held in
    ``state``: the loads sent, each pod read until it shows the state; once every one does and SCRAPE_S later (time
    for the EPP to scrape them), one request per ask (:func:`eppkit.conformance.pods.probe`'s ``model`` and
    ``headers``) PROBE_GAP_S apart, HTTP/1.1 and h2c in turn; each pod read again after the last was sent, then the
    loads dropped (a request queued behind them is served now) and the answers awaited. ``evidence``: the check's so
    far, which the readings follow."""
    client = h.client(bed)  # now: a probe never waits on the harness while another check starts a testbed
    with ExitStack() as loads:
        for _, load in pods.values():
            loads.enter_context(load)
        before = {key: until(lambda ep=ep: state.read(ep.address), lambda seen, key=key: state.shows(seen, key),
                             state.within_s) for key, (ep, _) in pods.items()}
        evidence = [*evidence, *(f"{state.load.format(key=key)} sent straight to {ep.name} ({ep.address}); its "
                                 f"/metrics then: {state.words(before[key])}" for key, (ep, _) in pods.items())]
        missed = [key for key, seen in before.items() if not state.shows(seen, key)]
        if missed:
            key = missed[0]
            return Held(before, evidence, Result(
                NOT_RUN, f"{pods[key][0].name} would not {state.becomes.format(key=key)}: its /metrics showed "
                f"{state.words(before[key])} {state.within_s:g} s after {state.load.format(key=key)} were sent to it"
                f"{state.note}", evidence))
        time.sleep(SCRAPE_S)
        with ThreadPoolExecutor(max_workers=len(asks) or 1) as workers:
            futures = []
            for i, ask in enumerate(asks):
                futures.append(workers.submit(probe, h, bed, PROTOCOLS[i % len(PROTOCOLS)], client=client, **ask))
                time.sleep(PROBE_GAP_S)
            after = {key: state.read(ep.address) for key, (ep, _) in pods.items()}
            dropped = time.monotonic()
            loads.close()
            sents = [f.result() for f in futures]
    evidence += [f"{ep.name}'s /metrics after the last request was sent: {state.words(after[key])}"
                 for key, (ep, _) in pods.items()]
    return Held(before, evidence, _not_held(state, pods, after, sents, dropped, evidence), after, sents)


def _not_held(state: State[K, T], pods: dict[K, tuple[Any, BusyLoad]], after: dict[K, T], sents: list,
              dropped: float, evidence: list[str]) -> Result | None:
    """Not run when a pod left the state before the last request was sent, or a request left the client only once
    the loads were dropped; else None."""
    stopped = [key for key, seen in after.items() if not state.shows(seen, key)]
    if stopped:
        key = stopped[0]
        return Result(NOT_RUN, f"{pods[key][0].name} stopped {state.being.format(key=key)} before the last request "
                      f"was sent (its /metrics: {state.words(after[key])})", evidence)
    late = [i for i, sent in enumerate(sents) if sent.result.started_s >= dropped]
    if late:
        return Result(NOT_RUN, f"request {late[0] + 1} of {len(sents)} left the client only after the pods' load was "
                      f"dropped ({sents[late[0]].result.started_s - dropped:.2f} s after): the machine was too busy to "
                      "send it while the pods carried it", evidence)
    return None


def envoy_sent(bed, sent) -> str:
    """Where Envoy sent ``sent`` (the pod's name) and its access-log record of it."""
    upstream = sent.hop["upstream"] if sent.hop is not None else "?"
    names = {ep.address: ep.name for ep in bed.backends}
    return f"Envoy sent it to {names.get(upstream, upstream)}; {evidence_of(sent.hop)}"
