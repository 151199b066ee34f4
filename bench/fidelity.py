"""Mock fidelity and capacity against a peer: the kit's mock vLLM vs llm-d-inference-sim.

Both mocks run at once (the idle one costs nothing) and get the same workload, level by level
in turns (who goes first alternates), from the same bare asyncio client (bench/mock_capacity.py's
``StreamProtocol``: it only timestamps SSE ``data:`` events): N concurrent streaming
``/v1/completions`` requests at 100 ms TTFT and 20 ms inter-token latency, arrivals spread
over max(0.5 s, N/250 s), each long enough to cover a steady window once all N have started.

Per level: TTFT error (first token arrival - request write - 100 ms) over the N requests;
inter-token error |gap - 20 ms| of the gaps inside the steady window (p50 / p99 / max); the
mock's CPU (% of one core) and memory (RSS, peak RSS) in that window; the client's own CPU.
Two capacities: a level is held *on time* when every stream completed with all its tokens and
the p99 inter-token error is under 5 ms (on a shared 2-core machine that is often below the
machine's own timer floor, so it mostly measures the machine); a level is *kept pace with* when
every stream completed, the tokens arrived at >= 95 % of the nominal rate (N x 50 per second)
and the median gap error is under 5 ms. The signed mean gap error shows drift: a mock that
sleeps the inter-token latency after each write, rather than to absolute deadlines, runs slow
by its own write time per token. Streams that did not all complete end the ramp. Timing is taken at the client, so client lag
counts against both mocks alike; the bare-timer floor (no mock) says what the machine allows.

The peer runs with ``--mode random`` and requests carry ``"ignore_eos": true`` (exactly
``max_tokens`` tokens), a dummy model name (its regex tokenizer, nothing downloaded) and queue
limits raised so that nothing waits.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from eppkit.services.runner import run_loop

from bench.mock_capacity import (
    ITL_MS,
    TTFT_MS,
    StreamProtocol,
    connect_all,
    level_plan,
    percentile,
    steady_window,
    timer_floor,
)
from bench.system import cpu_seconds, loadavg, memory_kib
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady

PASS_P99_MS = 5.0
PACE_PCT = 95.0


@dataclass(frozen=True)
class MockSpec:
    name: str
    argv: Callable[[int], list[str]]  # port -> command line
    env: dict[str, str]
    note: str


def ours() -> MockSpec:
    return MockSpec(
        name="eppkit mock vLLM",
        argv=lambda port: [sys.executable, "-m", "eppkit.services.vllm", "--host", "127.0.0.1", "--port", str(port),
                           "--instance", "bench", "--time-to-first-token", str(TTFT_MS),
                           "--inter-token-latency", str(ITL_MS), "--max-num-seqs", "100000",
                           "--max-waiting-queue-length", "100000", "--max-model-len", "100000",
                           "--log-level", "WARNING"],
        env={"EPPKIT_OTLP_ENDPOINT": ""},
        note="Python 3.11, one process (one core at most); spans created, not exported",
    )


def peer(binary: Path, version: str) -> MockSpec:
    return MockSpec(
        name=f"llm-d-inference-sim {version}",
        argv=lambda port: [str(binary), "--model", "mock-llm", "--port", str(port), "--mode", "random",
                           "--time-to-first-token", f"{TTFT_MS:g}ms", "--inter-token-latency", f"{ITL_MS:g}ms",
                           # It preallocates channels of (max-num-seqs + queue) x max-model-len entries:
                           # 100000 x 100000 runs it out of memory at start-up. 2000 running is above every level.
                           "--max-num-seqs", "2000", "--max-waiting-queue-length", "1000",
                           "--max-model-len", "1024", "--seed", "1"],
        env={},
        note="Go, GOMAXPROCS = 2 (both cores)",
    )


def request_bytes(port: int, max_tokens: int, i: int) -> bytes:
    body = json.dumps({"model": "mock-llm", "prompt": f"bench stream {i}", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


async def level(port: int, pid: int, n: int, steady_s: float, timeout_s: float) -> dict:
    spread_s, tokens = level_plan(n, steady_s)
    protos = await connect_all(port, n)
    rng = random.Random(n)
    t0, window_start, window_end = steady_window(spread_s, steady_s)

    async def fire(i: int, proto: StreamProtocol) -> None:
        await asyncio.sleep(rng.uniform(0, spread_s))
        proto.send(request_bytes(port, tokens, i))

    async def snapshot(at: float):
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        return time.monotonic(), cpu_seconds(pid) or 0.0, time.process_time(), memory_kib(pid)

    snap_a = asyncio.ensure_future(snapshot(window_start))
    snap_b = asyncio.ensure_future(snapshot(window_end))
    try:
        await asyncio.gather(*(fire(i, p) for i, p in enumerate(protos)))
        # asyncio.wait does not cancel what is still pending at the deadline (gather under wait_for would).
        _, pending = await asyncio.wait([p.done for p in protos], timeout=timeout_s)
        timed_out = bool(pending)
        finished = [p.done.done() and p.done.result() for p in protos]
        (ta, cpu_a, own_a, _), (tb, cpu_b, own_b, mem) = await snap_a, await snap_b
    finally:
        gc.enable()
        snap_a.cancel()
        snap_b.cancel()
        for p in protos:
            if p.transport is not None:
                p.transport.close()
    wall = tb - ta
    ttft_err = [(p.events[0] - p.sent_at) * 1000.0 - TTFT_MS for p in protos if p.events and p.sent_at]
    signed: list[float] = []  # gap - ITL: its mean is the mock's drift (a late token that delays the next)
    for p in protos:
        ev = p.events
        signed.extend((b - a) * 1000.0 - ITL_MS for a, b in zip(ev, ev[1:]) if window_start <= a and b <= window_end)
    steady = [abs(x) for x in signed]
    complete = sum(1 for ok, p in zip(finished, protos) if ok and len(p.events) == tokens)
    r2 = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, 2)  # noqa: E731
    out = {
        "streams": n, "tokens_per_stream": tokens, "complete": complete, "timed_out": timed_out,
        "gaps": len(steady),
        "itl_error_p50_ms": r2(percentile(steady, 50)), "itl_error_p99_ms": r2(percentile(steady, 99)),
        "itl_error_max_ms": r2(max(steady)) if steady else None,
        "ttft_error_p50_ms": r2(percentile(ttft_err, 50)), "ttft_error_p99_ms": r2(percentile(ttft_err, 99)),
        "itl_mean_error_ms": r2(sum(signed) / len(signed)) if signed else None,
        "tokens_per_s": round(len(steady) / wall) if wall > 0 else 0,
        "rate_pct": round(100.0 * len(steady) / wall / (n * 1000.0 / ITL_MS), 1) if wall > 0 else 0.0,
        "mock_cpu_pct": round(100.0 * (cpu_b - cpu_a) / wall, 1) if wall > 0 else None,
        "client_cpu_pct": round(100.0 * (own_b - own_a) / wall, 1) if wall > 0 else None,
        "rss_mib": round(mem.get("VmRSS", 0) / 1024, 1), "peak_rss_mib": round(mem.get("VmHWM", 0) / 1024, 1),
        "loadavg": loadavg(),
    }
    p50, p99 = out["itl_error_p50_ms"], out["itl_error_p99_ms"]
    out["held"] = bool(complete == n and p99 is not None and p99 < PASS_P99_MS)
    # Keeps pace: every stream done, the tokens delivered at >= 95 % of the nominal rate, the median gap on time.
    out["keeps_pace"] = bool(complete == n and out["rate_pct"] >= PACE_PCT and p50 is not None and p50 < PASS_P99_MS)
    return out


async def ttft_sequential(port: int, count: int = 20) -> list[float]:
    """TTFT error of ``count`` requests sent one after another (one stream at a time)."""
    errors = []
    for i in range(count):
        (proto,) = await connect_all(port, 1)
        proto.send(request_bytes(port, 2, 10_000 + i))
        try:
            await asyncio.wait_for(proto.done, 5.0)
        finally:
            proto.transport.close()
        if proto.events:
            errors.append((proto.events[0] - proto.sent_at) * 1000.0 - TTFT_MS)
    return errors


def _start(spec: MockSpec, run_dir: Path) -> tuple[ManagedProcess, int]:
    port = PortAllocator().port()
    slug = spec.name.split()[0].replace("/", "-")
    proc = ManagedProcess(slug, spec.argv(port), run_dir / f"fidelity-{slug}.log").with_env(**spec.env)
    proc.start()
    proc.wait_ready(HttpReady(f"http://127.0.0.1:{port}/health", timeout_s=30),
                    hint="run the command in the log by hand to see why it does not start")
    return proc, port


def run(specs: list[MockSpec], levels: tuple[int, ...], steady_s: float, run_dir: Path,
        progress: Callable[[str], None], left: Callable[[], float]) -> dict:
    """Both mocks up at once (the idle one costs nothing), each level run on one then the other —
    who goes first alternates — so the two figures of a level were taken seconds apart."""
    out: dict = {"itl_ms": ITL_MS, "ttft_ms": TTFT_MS, "pass_p99_ms": PASS_P99_MS, "pace_pct": PACE_PCT, "levels": list(levels),
                 "steady_s": steady_s, "mocks": []}
    out["floor_before"] = run_loop(timer_floor(1.5))
    running: list[tuple[dict, ManagedProcess, int]] = []
    try:
        for spec in specs:
            result: dict = {"mock": spec.name, "note": spec.note, "levels": []}
            out["mocks"].append(result)
            try:
                proc, port = _start(spec, run_dir)
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                progress(f"  {spec.name}: FAILED to start: {result['error'].splitlines()[0][:200]}")
                continue
            result["idle"] = {"rss_mib": round(memory_kib(proc.pid).get("VmRSS", 0) / 1024, 1)}
            running.append((result, proc, port))

        async def drive() -> None:
            for _, proc, port in running:
                await level(port, proc.pid, 5, 0.5, 15)  # warm-up: first-request paths
            stopped: set[str] = set()
            for i, n in enumerate(levels):
                order = running if i % 2 == 0 else running[::-1]
                for result, proc, port in order:
                    if result["mock"] in stopped:
                        continue
                    # One stream gives ~50 gaps a second: judge it on a longer window, its TTFT on 20 requests.
                    steady = max(steady_s, 4.0) if n == 1 else steady_s
                    budget = max(0.5, n / 250.0) + steady + 15
                    if left() < budget + 5:
                        result["levels"].append({"streams": n, "skipped": "deadline"})
                        continue
                    progress(f"  {result['mock']}: {n} streams ...")
                    r = await level(port, proc.pid, n, steady, budget)
                    if n == 1:
                        errs = await ttft_sequential(port)
                        r.update(ttft_samples=len(errs), ttft_error_p50_ms=round(percentile(errs, 50), 2),
                                 ttft_error_p99_ms=round(percentile(errs, 99), 2))
                    result["levels"].append(r)
                    await asyncio.sleep(0.5)
                    if r["complete"] < n:  # it could not even finish them: larger levels say nothing more
                        stopped.add(result["mock"])

        if running:
            run_loop(drive())
        for result, proc, _ in running:
            held = [r["streams"] for r in result["levels"] if r.get("held")]
            result["max_streams_held"] = max(held) if held else 0
            pace = [r["streams"] for r in result["levels"] if r.get("keeps_pace")]
            result["max_streams_keeping_pace"] = max(pace) if pace else 0
            result["highest_level_tried"] = max((r["streams"] for r in result["levels"] if "skipped" not in r), default=0)
            result["log_tail"] = proc.log_tail(5)
    except Exception as exc:
        for result, _, _ in running:
            result.setdefault("error", f"{type(exc).__name__}: {exc}"[:2000])
        progress(f"  fidelity FAILED: {type(exc).__name__}: {exc}"[:300])
    finally:
        for _, proc, _ in running:
            proc.stop()
    out["floor_after"] = run_loop(timer_floor(1.5))
    return out
