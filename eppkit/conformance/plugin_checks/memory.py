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
from concurrent.futures import ThreadPoolExecutor

import requests

from eppkit.conformance.checks.registry import MUST, NOT_RUN, PLUGIN_CHECKS, Result, check, judged
from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.witness import Sent
from eppkit.core import procfs
from eppkit.observability.client import PROTOCOLS, TracedClient

RESOURCES = "resources"
REQUESTS, WARM_UP = 2000, 500  # per testbed: growth is judged over the 1,500 after the warm-up
IN_FLIGHT, DEADLINE_S = 32, 40.0  # per testbed; requests not sent by the deadline are not (idle: 11-15 s; a loaded
# machine, such as CI's suite at load 8-12, takes longer: fewer than half served by then is "not run")
KIB, MIB = 1024, 1024 * 1024
# The bound: the gallery's no-op Lua filter grew Envoy's RSS by 0.2-0.6 MiB over the 1,500 requests after the warm-up,
# the floor by 0.1-0.4 MiB (2-core VM); a leak of 32 KiB a request by 50 MiB. 8 MiB is 5.5 KiB a request kept.
BOUND_MIB, OVER_FLOOR_MIB = 8.0, 4.0


def _shape(i: int) -> dict:
    """Request ``i`` of the load: a chat, a streamed chat or a chat of a longer answer, its body 1-16 KiB (no more:
    what a plugin does to larger bodies is bodies-byte-for-byte's to judge, and a body it breaks is not served)."""
    size = KIB + (i * 997) % (14 * KIB)
    return {"prompt": "x" * size, "stream": i % 3 == 1, "max_tokens": 2 if i % 3 == 0 else 4}


def _memory(h, bed) -> dict[str, float]:
    """Envoy's figures now (MiB): its process's RSS and its admin /memory's allocated and heap_size."""
    figures = {"rss": procfs.tree_rss_bytes(bed.processes()["envoy"].pid) / MIB}
    try:
        admin = requests.get(f"{bed.envoy_admin_url}/memory", timeout=5).json()
        figures.update({k: int(admin[k]) / MIB for k in ("allocated", "heap_size")})
    except (requests.RequestException, ValueError, KeyError):
        pass
    return figures


def _load(h, bed, side: str, indices: range, deadline: float, client) -> int:
    """Requests ``indices`` of the load through ``bed``, IN_FLIGHT at once, alternately HTTP/1.1 and h2c, none sent
    after ``deadline``; how many were sent. NotWitnessed with Envoy's record of the first not served."""

    def one(i: int):
        if time.monotonic() > deadline:
            return None
        h.protocol = PROTOCOLS[i % len(PROTOCOLS)]
        return h.protocol, h.chat(bed, client=client, **_shape(i))

    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        results = [r for r in pool.map(one, indices) if r is not None]
    for protocol, result in results:
        if result.status != 200 or result.error:
            h.must_serve(Sent(result, h.hop(bed, result), protocol), f"a request through the {side}")
    return len(results)


def _run(h, side: str, bed) -> dict:
    """The load through one testbed: Envoy's figures at the start, after the warm-up and at the end."""
    deadline = time.monotonic() + DEADLINE_S
    # Its spans are not exported: nobody reads the load's traces, and exporting 4,000 requests' spans was the
    # client's (the load's bound) work too. Each request still carries its trace id: Envoy's record of it is found.
    client = TracedClient(bed.envoy_url, None, pool_size=IN_FLIGHT)
    try:
        start = _memory(h, bed)
        warm = _load(h, bed, side, range(WARM_UP), deadline, client)
        after = _memory(h, bed)
        sent = _load(h, bed, side, range(WARM_UP, REQUESTS), deadline, client)
    finally:
        client.close()
    return {"start": start, "warm": after, "end": _memory(h, bed), "warm_n": warm, "n": sent,
            "seconds": DEADLINE_S - (deadline - time.monotonic())}


def _line(side: str, run: dict) -> str:
    start, warm, end = run["start"], run["warm"], run["end"]
    heap = "; Envoy's admin /memory: " + ", ".join(f"{k} {warm[k]:.1f} -> {end[k]:.1f} MiB" for k in
                                                   ("allocated", "heap_size") if k in warm and k in end)
    return (f"{side}: Envoy's RSS (VmRSS of its process) {start['rss']:.1f} MiB at the start, {warm['rss']:.1f} MiB "
            f"after {run['warm_n']} requests of warm-up, {end['rss']:.1f} MiB after {run['n']} more "
            f"({end['rss'] - warm['rss']:+.1f} MiB, {(end['rss'] - warm['rss']) * KIB / max(run['n'], 1):.1f} KiB a "
            f"request) in {run['seconds']:.1f} s" + (heap if len(heap) > 30 else ""))


@check("memory-bounded", "Envoy's memory stays bounded through the plugin", category=RESOURCES, level=MUST,
       source="eppkit (a gateway filter must not keep memory per request)", registry=PLUGIN_CHECKS,
       per_protocol=False)
def memory_bounded(h):
    """2,000 requests through the plugin and the same 2,000 through the floor (half HTTP/1.1, half h2c: chats, streamed
    chats, bodies of 1-16 KiB; 32 in flight; at most 40 s a testbed): Envoy's RSS grows, over the 1,500 after a
    warm-up of 500, by no more than max(8 MiB, the floor's growth + 4 MiB). Envoy's admin /memory (its heap) is in
    the evidence. Judged once over both protocols' requests; each must be served."""
    # One testbed after the other: both at once took longer on 2 cores (the client's and Envoys' CPU is the bound)
    runs = {side: _run(h, side, bed) for side, bed in (("plugin", h.bed()), ("floor", floor.bed(h)))}
    growth = {side: run["end"]["rss"] - run["warm"]["rss"] for side, run in runs.items()}
    allowed = max(BOUND_MIB, growth["floor"] + OVER_FLOOR_MIB)
    sent = runs["plugin"]["n"]
    evidence = [f"each testbed: {WARM_UP} requests of warm-up, then {REQUESTS - WARM_UP} judged ({', '.join(PROTOCOLS)} "
                f"alternately; chats, streamed chats, bodies of 1-16 KiB; {IN_FLIGHT} in flight)"]
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
