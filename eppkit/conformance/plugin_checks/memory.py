"""Envoy's memory stays bounded through the plugin: the same few thousand requests through the plugin's testbed and
its floor, and what Envoy holds after them. A filter that keeps something of every request (a global table, a cache
without a bound, a log kept for later) makes Envoy's memory grow with every request until the kernel kills it.

Two of Envoy's own figures: its resident memory (``VmRSS`` of its process in /proc: what a Lua filter allocates is
there, as LuaJIT takes its memory from the kernel itself) and its admin ``/memory`` (tcmalloc's ``allocated`` and
``heap_size``: Envoy's C++ heap, a dynamic module's or a filter's own allocations, not Lua's). Growth is measured
after a warm-up (Envoy's pools, buffers and connections fill with the first requests: 3-4 MiB on the floor too),
and the plugin's is held to the floor's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import requests

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import ONE_RUN, check
from eppkit.conformance.results import MUST, NOT_RUN, Result, judged
from eppkit.conformance.witness import Sent
from eppkit.core import procfs
from eppkit.native_load import NativeDriver
from eppkit.observability.client import PROTOCOLS, ClientResult
from eppkit.workload import Load, PlannedRequest, Sample

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness

RESOURCES = "resources"
REQUESTS, WARM_UP = 2000, 500  # per testbed: growth is judged over the 1,500 after the warm-up
# Per testbed, sent by the kit's load client (eppkit.native_load): idle, 2-4 s a testbed; a loaded machine (CI's
# suite) takes longer, up to DEADLINE_S, after which no request is sent (fewer than half served: "not run").
IN_FLIGHT, DEADLINE_S = 32, 120.0
KIB, MIB = 1024, 1024 * 1024
# The bound: the gallery's no-op Lua filter grew Envoy's RSS by 0.2-0.6 MiB over the 1,500 requests after the warm-up,
# the floor by 0.1-0.4 MiB (2-core VM); a leak of 32 KiB a request by 50 MiB. 8 MiB is 5.5 KiB a request kept.
BOUND_MIB, OVER_FLOOR_MIB = 8.0, 4.0
JUDGED = REQUESTS - WARM_UP  # requests per testbed whose growth is judged


def _plan(model: str) -> list[PlannedRequest]:
    """The load: chats, streamed chats and chats of a longer answer in turn, bodies of 1-16 KiB (no more: what a
    plugin does to larger bodies is bodies-byte-for-byte's to judge, and a body it breaks is not served)."""
    return [PlannedRequest(i, {"model": model, "messages": [{"role": "user",
                                                             "content": "x" * (KIB + (i * 997) % (14 * KIB))}],
                               "max_tokens": 2 if i % 3 == 0 else 4, "stream": i % 3 == 1}, 1, 0)
            for i in range(REQUESTS)]


def _memory(h: PluginHarness, bed) -> dict[str, float]:
    """Envoy's figures now (MiB): its process's RSS and its admin /memory's allocated and heap_size."""
    figures = {"rss": procfs.tree_rss_bytes(bed.processes()["envoy"].pid) / MIB}
    try:
        admin = requests.get(f"{bed.envoy_admin_url}/memory", timeout=5).json()
        figures.update({k: int(admin[k]) / MIB for k in ("allocated", "heap_size")})
    except (requests.RequestException, ValueError, KeyError):
        pass
    return figures


def _load(h: PluginHarness, bed, side: str, plan: list[PlannedRequest], deadline: float) -> int:
    """``plan`` through ``bed``, IN_FLIGHT at once, alternately HTTP/1.1 and h2c, with the headers a gate lets
    through, none sent after ``deadline``; how many were sent. NotWitnessed with Envoy's record of the first not
    served."""
    load = Load(requests=len(plan), concurrency=IN_FLIGHT, max_duration_s=max(0.1, deadline - time.monotonic()),
                warmup=0, request_timeout_s=h.request_timeout_s)
    run = NativeDriver(bed.envoy_url, load, protocols=PROTOCOLS, headers=h.target.let_through_headers()).run(plan)
    for sample in run.samples:
        if not sample.ok:
            result = _result(sample)
            h.must_serve(Sent(result, h.hop(bed, result), PROTOCOLS[sample.index % len(PROTOCOLS)]),
                         f"a request through the {side}")
    return len(run.samples)


def _result(sample: Sample) -> ClientResult:
    """What the client saw of a request the load client sent, as the traced client says it."""
    return ClientResult(sample.trace_id, sample.status, {}, body=sample.detail,
                        error=None if sample.status else sample.detail)


def _run(h: PluginHarness, side: str, bed) -> dict:
    """The load through one testbed: Envoy's figures at the start, after the warm-up and at the end."""
    started = time.monotonic()
    deadline = started + DEADLINE_S
    plan = _plan(bed.backends[0].model)
    start = _memory(h, bed)
    warm = _load(h, bed, side, plan[:WARM_UP], deadline)
    after = _memory(h, bed)
    sent = _load(h, bed, side, plan[WARM_UP:], deadline)
    return {"start": start, "warm": after, "end": _memory(h, bed), "warm_n": warm, "n": sent,
            "seconds": time.monotonic() - started}


def _line(side: str, run: dict) -> str:
    start, warm, end = run["start"], run["warm"], run["end"]
    heap = "; Envoy's admin /memory: " + ", ".join(f"{k} {warm[k]:.1f} -> {end[k]:.1f} MiB" for k in
                                                   ("allocated", "heap_size") if k in warm and k in end)
    return (f"{side}: Envoy's RSS (VmRSS of its process) {start['rss']:.1f} MiB at the start, {warm['rss']:.1f} MiB "
            f"after {run['warm_n']} requests of warm-up, {end['rss']:.1f} MiB after {run['n']} more "
            f"({end['rss'] - warm['rss']:+.1f} MiB, {(end['rss'] - warm['rss']) * KIB / max(run['n'], 1):.1f} KiB a "
            f"request) in {run['seconds']:.1f} s" + (heap if len(heap) > 30 else ""))


@check("memory-bounded", "Envoy's memory stays bounded through the plugin", category=RESOURCES, level=MUST,
       source="eppkit (a gateway filter must not keep memory per request)", uses=(ONE_RUN,))
def memory_bounded(h: PluginHarness) -> Result:
    """{REQUESTS:,} requests through the plugin and the same \\
    {REQUESTS:,} through the floor (half HTTP/1.1, half h2c: chats, streamed
    chats, bodies of 1-16 KiB; {IN_FLIGHT} in flight, sent by the kit's load \\
    client; at most {DEADLINE_S:g} s a testbed): Envoy's RSS grows, over the {JUDGED:,} after a
    warm-up of {WARM_UP}, by no more than max({BOUND_MIB:g} MiB, the \\
    floor's growth + {OVER_FLOOR_MIB:g} MiB). Envoy's admin /memory (its heap) is in
    the evidence. Judged once over both protocols' requests; each must be served."""
    # One testbed after the other: both at once took longer on 2 cores (the client's and Envoys' CPU is the bound)
    runs = {side: _run(h, side, bed) for side, bed in (("plugin", h.bed()), ("floor", floor.bed(h)))}
    growth = {side: run["end"]["rss"] - run["warm"]["rss"] for side, run in runs.items()}
    allowed = max(BOUND_MIB, growth["floor"] + OVER_FLOOR_MIB)
    sent = runs["plugin"]["n"]
    evidence = [f"each testbed: {WARM_UP} requests of warm-up, then {REQUESTS - WARM_UP} judged "
                f"({', '.join(PROTOCOLS)} alternately; chats, streamed chats, bodies of 1-16 KiB; {IN_FLIGHT} in "
                "flight)"]
    evidence += [_line(side, run) for side, run in runs.items()]
    short = [side for side, run in runs.items() if run["n"] < (REQUESTS - WARM_UP) // 2]
    if short:
        return Result(NOT_RUN, f"too few requests to judge: the {' and the '.join(short)} served fewer than "
                               f"{(REQUESTS - WARM_UP) // 2} within {DEADLINE_S:g} s", evidence)
    judged_what = f"RSS {growth['plugin']:+.1f} MiB over {sent} requests after the warm-up"
    problems = []
    if growth["plugin"] > allowed:
        problems.append(f"{judged_what} ({growth['plugin'] * KIB / sent:.1f} KiB a request), the floor's "
                        f"{growth['floor']:+.1f} MiB over its {runs['floor']['n']} (allowed +{allowed:.1f} MiB)")
    return judged(problems, evidence, failing="Envoy's memory grew with the requests through the plugin",
                  passing=f"Envoy's memory stayed bounded: {judged_what}, the floor's {growth['floor']:+.1f} MiB "
                          f"(allowed +{allowed:.1f} MiB; {', '.join(PROTOCOLS)})",
                  fix="Keep nothing per request beyond the request (a Lua global table, a cache without a bound); "
                      "bound what must be kept and evict")
