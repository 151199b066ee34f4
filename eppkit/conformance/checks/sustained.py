"""Sustained load through one EPP process: what a gateway's steady traffic finds that a few requests never do.

Every other check sends a handful of requests (the whole suite some 160, over several testbeds); an EPP that stops
serving after a few hundred streams, keeps memory per stream or slows down as its state grows passes them all.
This check, the verdict's soak, sends :data:`REQUESTS` through one EPP process on a testbed of its own,
:data:`IN_FLIGHT` at once, HTTP/1.1 and h2c, streamed and not, with the kit's load client (vegeta's attacker:
:mod:`eppkit.native_load`, a small part of the Python client's CPU, so the machine's goes on the EPP), and judges
from Envoy's record of each request and, where the kit started the EPP, its process in /proc. It runs by default
(``--quick`` leaves it out, and the verdict's first line says so), once in an Envoy version matrix, beside the
checks after it (:data:`~eppkit.conformance.registry.OWN_TESTBED`), up to the latency budget, which it would
disturb: the verdict waits for it once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import TYPE_CHECKING

from eppkit.conformance.registry import ONE_RUN, OWN_TESTBED, SERVED, SOAK, check
from eppkit.conformance.results import LOAD, NOT_RUN, Result, evidence_of, judged
from eppkit.core import procfs
from eppkit.core.polling import PollTimeout, poll
from eppkit.native_load import TRACED_EVERY, NativeDriver
from eppkit.observability import steps
from eppkit.workload import SCENARIOS, Load, Sample, plan_requests

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

REQUESTS = 2000  # through one EPP process: a few hundred above what any other check group sends through one
IN_FLIGHT = 32
# No request is sent after this (each one is bounded by --request-timeout). The kit's EPP takes 5-8 s here (2 cores
# at 2.45 GHz, another run's compiles beside): a slow machine runs long enough to reach the count.
MAX_S = 180.0
# Sent no further once what was sent says enough: this many lost (the check fails), or, after HALT_AFTER_S, a pace
# that could not send them all within twice MAX_S (an EPP that takes most of a second a request: not run, sooner).
ENOUGH_LOST, HALT_AFTER_S, HOPELESS_S = 100, 15.0, 2 * MAX_S
PROGRESS_EVERY_S = 5.0  # the verdict says how far the soak is, this often
MAX_TOKENS = 4  # a short answer: the EPP is judged, not the pods
# A slow-down, judged on two statistics of Envoy's EPP hop: the median (an EPP that slows as its state grows slows
# every request) and the p99 (one that slows in its tail). The last quarter's, within RATIO x the faster of the first
# two quarters' (the first is the warm-up: _baseline), each taken as at least its FLOOR_MS (a few ms on a quiet
# machine doubles with one scheduling hiccup on 2 cores). A quarter's p99 is the median of its WINDOWS windows' p99s
# (100 requests each): a second or two of the machine's other work (another testbed starting) moves one window, an
# EPP that slows down moves them all. The bound moves with the machine: the same requests' time at the pods (Envoy's
# upstream phase: the mock's first byte, as CPU-bound as the EPP), its last quarter's over the baseline quarter's
# (taken as at least PODS_FLOOR_MS), when more than 1. Sent by the kit's load client, the 2,000 take 5-8 s, a quarter
# a second or two: another verdict starting beside it (CI judges GAIE's EPP beside the kit's) moved the hop's last
# quarter 3.4x, and the pods' with it. A last quarter still over a bound is confirmed on 500 more requests
# (_confirmed) against a fresh process of the same EPP at the same time, on both statistics.
# The p99 alone let slows-per-stream pass in CI's suite: its second quarter's p99 (a 64 ms wait at its middle window)
# rose with the machine's noise to half its last's (306 ms), while the medians stayed 4x apart.
RATIO, MEDIAN_FLOOR_MS, P99_FLOOR_MS, PODS_FLOOR_MS, WINDOWS = 2.0, 10.0, 25.0, 10.0, 5


@dataclasses.dataclass(frozen=True)
class Stat:
    """A statistic of a quarter's hop times: ``q``-th percentile (of each of ``windows`` windows, their median)."""
    name: str
    q: int
    windows: int
    floor_ms: float

    def of(self, values: list[list[float]]) -> list[float | None]:
        return _quantiles(values, self.q, self.windows)


STATS = (Stat("median", 50, 1, MEDIAN_FLOOR_MS), Stat("p99", 99, WINDOWS, P99_FLOOR_MS))
WINDOW = REQUESTS // 4 // WINDOWS  # requests in a window of a quarter
CONFIRM = REQUESTS // 4  # more requests a slow-down is confirmed on (each side)
PODS_PHASE = "upstream"
# The EPP process's growth over the last three quarters (after the first quarter's warm-up: a runtime's pools, a
# garbage-collected heap's first growth). Measured here for 2,000 requests: the kit's EPP +1.6 MiB (+4 MiB from its
# start), threads 13 -> 13; the echo EPP +0.7 MiB, threads 9 -> 9; GAIE's EPP v1.5.0 (Go) +2.8 MiB, threads 8 -> 8.
# leaks-per-stream (the echo EPP keeping 128 KiB a stream) grows 185 MiB.
RSS_GROWTH_MIB, THREADS_GROWTH = 32, 16
# Envoy's record of a request: the EPP hop as Envoy waited for it (the end of the request to the upstream's start).
HOP_PHASE = "hold"
FRESH = "sustained-fresh"  # the variant of a fresh EPP process, the floor a slow-down is confirmed against


class ProcessWatch:
    """The EPP process's resident memory and threads (its own and its children's, /proc) at the start, after the
    first quarter of the requests and at the end; ``why_not`` says why there is none (not started by the kit)."""

    def __init__(self, h: EppHarness, bed):
        self.pid, self.why_not = None, None
        proc = bed.processes().get("epp") if h.target.kit_started else None
        if not h.target.kit_started:
            self.why_not = "not measured: the kit did not start the EPP (given by address)"
        elif proc is None or not getattr(proc, "pid", None):
            self.why_not = "not measured: the testbed shows no EPP process"
        else:
            self.pid = proc.pid
        self.points: dict[str, dict[str, int]] = {}
        self.warm_at = self.sent = 0  # requests done at the first quarter's sample, and in all
        self._lock = threading.Lock()
        self.sample("start")

    def sample(self, label: str) -> None:
        if self.pid is not None:
            self.points[label] = procfs.tree_status(self.pid, "VmRSS", "Threads")

    def progress(self, done: int, total: int, errors: int, elapsed_s: float) -> None:
        """The driver's progress: the first quarter's sample once it is done."""
        if done >= REQUESTS // 4:
            with self._lock:
                if "warm" not in self.points:
                    self.sample("warm")
                    self.warm_at = done

    def judge(self) -> tuple[list[str], list[str]]:
        """(evidence, problems) of the memory and threads."""
        if self.pid is None:
            return [f"the EPP's RSS and threads: {self.why_not}"], []
        points = {k: v for k, v in self.points.items() if "VmRSS" in v and "Threads" in v}
        if not {"warm", "end"} <= set(points):
            return [(f"the EPP's RSS and threads: not measured (pid {self.pid} gone, or fewer than "
                     f"{REQUESTS // 4} requests)")], []
        mib = {k: v["VmRSS"] / 1024 for k, v in points.items()}
        grew, threads = mib["end"] - mib["warm"], points["end"]["Threads"] - points["warm"]["Threads"]
        after = max(1, self.sent - self.warm_at)
        per = grew * 1024 / after
        evidence = [f"the EPP process (pid {self.pid}, /proc): RSS " + " -> ".join(f"{k} {v:.1f} MiB" for k, v in
                    mib.items()) + f" ({grew:+.1f} MiB over the last {after:,} requests, "
                    f"{per:.1f} KiB a request; bound {RSS_GROWTH_MIB} MiB); threads " +
                    " -> ".join(str(v["Threads"]) for v in points.values()) + f" (bound +{THREADS_GROWTH})"]
        problems = []
        if grew > RSS_GROWTH_MIB:
            problems.append(f"the EPP's memory grew by {grew:.0f} MiB over the last {after:,} "
                            f"requests ({per:.0f} KiB a request; bound {RSS_GROWTH_MIB} MiB): it keeps something "
                            "per stream")
        if threads > THREADS_GROWTH:
            problems.append(f"the EPP's threads grew by {threads} (bound {THREADS_GROWTH}): it keeps a thread per "
                            "stream")
        return evidence, problems


def _plan(model: str, count: int = REQUESTS) -> list:
    """The requests: short chats, every other pair streamed (with the driver's protocols in turn, each protocol
    sends both)."""
    return [dataclasses.replace(r, body={**r.body, "model": model, "max_tokens": MAX_TOKENS,
                                         "stream": (r.index // 2) % 2 == 1})
            for r in plan_requests(SCENARIOS["chat"], count, seed=50)]


def _hops(bed, samples: list[Sample]) -> dict:
    """Envoy's record of each answered request, by trace id (its access log lags its answers by a flush)."""
    wanted = {s.trace_id for s in samples if s.status}
    found: dict = {}

    def logged() -> bool:
        found.update({h.trace_id: h for h in bed.hops() if h.trace_id in wanted})
        return len(found) >= len(wanted)

    try:
        poll(logged, timeout_s=3.0, interval_s=0.1, describe="Envoy's record of the sustained requests")
    except PollTimeout:
        pass
    return found


def _quantiles(values: list[list[float]], q: int, windows: int = 1) -> list[float | None]:
    """Each quarter's ``q``-th percentile; with ``windows``, the median of those of that many equal windows of it."""
    out: list[float | None] = []
    for v in values:
        size = max(1, len(v) // windows)
        parts = [v[i * size:(i + 1) * size] for i in range(windows)] if len(v) >= windows else [v]
        each = [steps.percentile(p, q) for p in parts if p]
        out.append(steps.percentile(each, 50) if each else None)
    return out


def _ms(values: list[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:.1f}" for v in values)


def _quarters(samples: list[Sample], value, parts: int = 4) -> list[list[float]]:
    size = max(1, len(samples) // parts)
    return [[v for v in map(value, samples[i * size:(i + 1) * size]) if v is not None] for i in range(parts)]


def _lost(samples: list[Sample], hops: dict) -> list[Sample]:
    """The requests not served 200 with their whole answer (a stream to its [DONE]), or whose ext_proc call
    failed in Envoy's record."""
    def bad(s: Sample) -> bool:
        hop = hops.get(s.trace_id)
        return not s.ok or hop is None or any(v != 0 for v in hop.call_statuses().values())

    return [s for s in samples if bad(s)]


def _hop_values(samples: list[Sample], hops: dict, parts: int = 4, phase: str = HOP_PHASE) -> list[list[float]]:
    return _quarters(samples, lambda s: hops[s.trace_id].phases().get(phase) if s.trace_id in hops and s.ok
                     else None, parts)


def _baseline(quarters: list[float | None]) -> int | None:
    """The quarter the last is judged against: the faster of the first two (the first is the warm-up, as for the
    memory: a process's first connections and pools, and on a busy machine whatever else started with it. CI's
    suite: the echo EPP's first quarter's p99 205 ms, its second 120 ms, and slows-per-stream's last 370 ms passed 2x
    the first)."""
    early = [(v, i) for i, v in enumerate(quarters[:2]) if v is not None]
    return min(early)[1] if early else None


def _machine(before: float | None, later: float | None) -> float:
    """How much slower the pods answered ``later`` than ``before`` (at least 1: a machine that got no slower does not
    tighten the bound)."""
    if before is None or later is None:
        return 1.0
    return max(1.0, later / max(before, PODS_FLOOR_MS))


@dataclasses.dataclass(frozen=True)
class Over:
    """A statistic whose last quarter is over its bound: (its quarters, the baseline quarter, the bound)."""
    stat: Stat
    quarters: list
    base: int
    bound: float


def _over_bounds(hop: list[list[float]], pods: list[list[float]]) -> tuple[list[str], list[Over]]:
    """For each statistic, its quarters as evidence and, where the last is over its bound, that."""
    said, over = [], []
    for stat in STATS:
        quarters, pods_q = stat.of(hop), stat.of(pods)
        base = _baseline(quarters)
        line = f"{stat.name}: {_ms(quarters)} (the pods {_ms(pods_q)})"
        if base is not None and quarters[3] is not None:
            machine = _machine(pods_q[base], pods_q[3])
            bound = RATIO * max(quarters[base], stat.floor_ms) * machine
            line += f", bound on the last {bound:.1f}" + (f" (the pods {machine:.1f}x slower)" if machine > 1 else "")
            if quarters[3] > bound:
                over.append(Over(stat, quarters, base, bound))
        said.append(line)
    return said, over


def _slowdown(h: EppHarness, bed, driver: NativeDriver, samples: list[Sample], hops: dict,
              evidence: list[str]) -> list[str]:
    """The last quarter's median and p99 hop against the first quarters', each bound moved by how much slower the
    pods answered the same requests (the machine's speed, in the same run); over either, confirmed against a fresh
    EPP process (:func:`_confirmed`) before it is the EPP's."""
    said, over = _over_bounds(_hop_values(samples, hops), _hop_values(samples, hops, phase=PODS_PHASE))
    evidence.append(f"the EPP hop by quarter (ms; Envoy's {HOP_PHASE}, a p99 the median of {WINDOWS} windows'; the "
                    f"pods' first byte, Envoy's {PODS_PHASE}, alike): " + "; ".join(said) + "; the client's end to "
                    "end p99: " + _ms(_quantiles(_quarters(samples, lambda s: s.e2e_ms if s.ok else None), 99)))
    return _confirmed(h, bed, driver, over, evidence) if over else []


def _confirmed(h: EppHarness, bed, driver: NativeDriver, over: list[Over], evidence: list[str]) -> list[str]:
    """A last quarter over its bound, confirmed against a floor in the same run: 500 more requests through the EPP
    process that served the 2,000 and, at the same time, 500 through a fresh one of the same EPP (its own testbed).
    The machine slows both alike (on 2 cores an EPP that is the load's bound turns a smaller share of the CPU into
    a longer queue, which the pods' time does not show); an EPP that slows as its state grows is slower than its
    fresh self. Where the kit cannot start a fresh one (an EPP given by address), the bound above judges alone."""
    plan = _plan(bed.backends[0].model, REQUESTS + CONFIRM)[REQUESTS:]
    with h.own(FRESH) if h.target.kit_started else nullcontext() as fresh_bed:
        sides = {"soaked": bed, **({"fresh": fresh_bed} if fresh_bed is not None else {})}
        with ThreadPoolExecutor(max_workers=len(sides)) as pool:
            runs = dict(zip(sides, pool.map(
                lambda b: NativeDriver(b.envoy_url, driver.load, protocols=driver.protocols).run(plan),
                sides.values())))
        found = _hops(bed, runs["soaked"].samples)
        soaked, lost = _hop_values(runs["soaked"].samples, found, parts=1), _lost(runs["soaked"].samples, found)
        fresh = (_hop_values(runs["fresh"].samples, _hops(fresh_bed, runs["fresh"].samples), parts=1)
                 if fresh_bed is not None else None)
    sent = len(runs["soaked"].samples)
    problems, said = [], []
    for o in over:
        again = o.stat.of(soaked)[0]
        floor = o.stat.of(fresh)[0] if fresh is not None else None
        bound = o.bound if floor is None else RATIO * max(floor, o.stat.floor_ms)
        said.append(f"{o.stat.name} {_ms([again])}" + ("" if floor is None else f" against a fresh process's "
                                                         f"{_ms([floor])}") + f" (bound {bound:.1f})")
        if again is not None and again > bound:
            against = (f"> {RATIO:g}x a fresh EPP process's {floor:.1f} ms at the same time" if floor is not None
                       else f"> {RATIO:g}x the first quarters' {o.quarters[o.base]:.1f} ms")
            problems.append(f"the EPP slowed down: the last quarter's {o.stat.name} hop {o.quarters[3]:.1f} ms, and "
                            f"{again:.1f} ms over {sent} more, {against}")
    evidence.append(f"{sent} more requests to confirm it ({len(lost)} lost"
                    + ("" if fresh is None else f"; at the same time {len(runs['fresh'].samples)} through a fresh "
                       "EPP process") + "), ms: " + "; ".join(said))
    if lost:
        return [f"{len(lost)} of {sent} requests sent after the first {REQUESTS:,} were lost"]
    return problems


@check("sustained-load", f"{REQUESTS:,} requests through one EPP process, {IN_FLIGHT} in flight: none lost, no "
       "slow-down, no leak", category=LOAD, source="eppkit (a gateway's steady traffic through one EPP)",
       needs=SERVED, uses=(ONE_RUN, OWN_TESTBED, SOAK))
def sustained_load(h: EppHarness) -> Result:
    """{REQUESTS!W} short chats through one EPP process (a \\
    testbed of its own), {IN_FLIGHT} in flight (one at a time for an
    EPP that serves one stream at a time), HTTP/1.1 and h2c in turn, every other pair streamed, sent by the kit's
    load client (one in {TRACED_EVERY} traced): every one \\
    served 200 with its whole answer (a stream to its ``[DONE]``) and
    every ext_proc call OK in Envoy's record; the last \\
    quarter's median and p99 EPP hop (Envoy's ``{HOP_PHASE}``; a quarter's p99 the
    median of its {WINDOWS!w} {WINDOW}-request windows') each within \\
    {RATIO:g}x the faster of the first two quarters' (the first is the warm-up; taken as at least
    {MEDIAN_FLOOR_MS:g} and {P99_FLOOR_MS:g} ms; times how much slower the pods answered the same requests, Envoy's
    ``{PODS_PHASE}`` phase, when they did), or else {CONFIRM} more
    requests' median and p99 within {RATIO:g}x those of {CONFIRM} sent at \\
    the same time through a fresh process of the same EPP (a floor in
    the same run: the machine slows both alike, an EPP that slows as its state grows is slower than its fresh self;
    an EPP given by address: within the bound above); and, where the kit started the EPP, its resident memory
    within +{RSS_GROWTH_MIB} MiB and its threads within +{THREADS_GROWTH} over the last \\
    three quarters (/proc; before and after in the evidence). Judged by default (``--quick`` leaves it
    out, said in the verdict's first line), once in an Envoy version matrix. On a slow machine it runs until all
    {REQUESTS:,} are sent, up to {MAX_S:g} s; not run only when fewer \\
    were sent by then, none lost, or when after {HALT_AFTER_S:g} s its pace
    could not send them within {HOPELESS_S:g} s (a slow EPP: the \\
    latency budget judges it); once {ENOUGH_LOST} are lost, no more are
    sent."""
    with h.own("sustained") as bed:
        mark = h.mark(bed)
        watch = ProcessWatch(h, bed)
        in_flight = IN_FLIGHT if h.concurrent else 1
        load = Load(requests=REQUESTS, concurrency=in_flight, max_duration_s=MAX_S, warmup=0,
                    request_timeout_s=h.request_timeout_s)
        started = time.monotonic()
        said = [0.0]  # when progress was last said

        def progress(done: int, total: int, errors: int, elapsed_s: float) -> None:
            watch.progress(done, total, errors, elapsed_s)
            if elapsed_s - said[0] >= PROGRESS_EVERY_S:
                said[0] = elapsed_s
                h.progress(f"sustained-load: {done:,} of {total:,} served or lost ({errors} lost) in "
                           f"{elapsed_s:.0f} s")
            if errors >= ENOUGH_LOST:
                driver.halt(f"{errors} lost")
            elif elapsed_s >= HALT_AFTER_S and done and elapsed_s * total / done > HOPELESS_S:
                driver.halt(f"{done} in {elapsed_s:.0f} s: {total} would take {elapsed_s * total / done:.0f} s")

        driver = NativeDriver(bed.envoy_url, load, protocols=h.protocols, on_progress=progress)
        run = driver.run(_plan(bed.backends[0].model))
        wall = time.monotonic() - started
        watch.sample("end")
        samples = run.samples
        watch.sent = len(samples)
        hops = _hops(bed, samples)
        lost = _lost(samples, hops)
        streamed = sum(1 for i in range(len(samples)) if (i // 2) % 2 == 1)
        evidence = [f"{len(samples):,} of {REQUESTS:,} requests sent ({', '.join(h.protocols)} in turn; {streamed} "
                    f"streamed; one in {TRACED_EVERY} traced), {in_flight} in flight, in {wall:.1f} s "
                    f"({len(samples) / max(wall, 0.001):.0f}/s)" + (f"; {run.stopped}" if run.stopped else ""),
                    f"served whole: {len(samples) - len(lost):,}; lost: {len(lost):,}"
                    + (f" {run.errors() or 'ext_proc call failed in Envoy’s record'}" if lost else "")]
        problems = []
        if lost:
            first = lost[0]
            evidence.append(f"the first lost (request {first.index}): HTTP {first.status} {first.error or ''} "
                            f"{first.detail or ''}".rstrip() + f"; {evidence_of(hops.get(first.trace_id))}")
            problems.append(f"{len(lost):,} of {len(samples):,} requests were lost (not served 200 with their whole "
                            f"answer), the first at request #{first.index}")
        if not lost and len(samples) >= REQUESTS:  # quarters of a run cut short are not the EPP's pace
            problems += _slowdown(h, bed, driver, samples, hops, evidence)
        seen, grew = watch.judge()
        evidence += seen
        problems += grew
        if problems:
            evidence += h.log_evidence(marks=[mark])
        elif len(samples) < REQUESTS:
            return Result(NOT_RUN, f"too slow to judge under sustained load: {len(samples):,} of {REQUESTS:,} requests "
                          f"sent, none lost ({run.stopped or f'{MAX_S:g} s'}); the latency budget judges the EPP's "
                          "hop. Run the verdict on a machine less busy", evidence)
        return judged(problems, evidence, failing="under sustained load through one EPP process",
                      passing=f"{REQUESTS:,} served whole, no slow-down, no growth",
                      fix="Serve every stream for as long as the EPP runs, and let go of what each one held when it "
                          "ends.")
