"""How many concurrent streams one mock vLLM process holds on time, and how exact its TTFT is.

Not a test: run it by hand, it stops itself (a hard deadline, under 3 minutes in all).

    python bench/mock_capacity.py            # full run, prints a report
    python bench/mock_capacity.py --quick    # smaller levels, ~30 s
    python bench/mock_capacity.py --json out.json

What it measures, on 127.0.0.1 only:

0. The machine's timer floor: how late a bare asyncio timer every 20 ms fires in this
   process, before and after (no mock involved). On a shared machine this bounds
   everything below.
1. Streaming capacity at 20 ms inter-token latency. For each concurrency level N it
   opens N connections, starts N streaming requests spread over max(0.5 s, N/250 s)
   (random phases, like real arrivals), and records the arrival time of every token
   event. The error of a gap is |gap - 20 ms|, judged in a steady window once every
   stream has started (the ramp-up is reported, not judged); a level passes when every
   stream completed and the p99 error is under 5 ms. The ramp stops after two failing
   levels in a row, then bisects once. Tokens are timed at the client, so client lag
   counts against the mock: the figures are an upper bound on the mock's own error,
   which is reported next to them from the mock's ``eppkit_mock_token_lateness_seconds``.
   TTFT error of the N requests is reported per level too (N = 1, 100, 500, ...).
2. TTFT error in a burst at 1, 100 and 500 requests: N connections opened first, then N
   streaming requests written at once; error = (first token arrival - request write) -
   configured TTFT.

The mock runs as its own process (so it has its own GIL), without span export. The
client is a bare asyncio Protocol that only timestamps ``data:`` events, so it costs far
less than the mock per token.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eppkit.services.runner import run_loop  # noqa: E402

from bench.system import machine_cpu_seconds  # noqa: E402
from eppkit.components.process import ServiceProcess  # noqa: E402
from eppkit.core import procfs  # noqa: E402

HARD_DEADLINE_S = 170.0
ITL_MS = 20.0
TTFT_MS = 100.0
SCRAPE_MARGIN_S = 0.15  # /metrics scrapes this far outside the judged window


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


class StreamProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection; records when each SSE ``data:`` event arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.sent_at: float | None = None
        self.events: list[float] = []  # arrival time per token event
        self.done = loop.create_future()
        self._tail = b""
        self._in_body = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: bytes) -> None:
        self.sent_at = time.monotonic()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buf = self._tail + data
        # count complete token events; the final chunk, usage and [DONE] are not tokens
        start = 0
        while True:
            i = buf.find(b"data: ", start)
            if i < 0:
                break
            j = buf.find(b"\n\n", i)
            if j < 0:
                break
            event = buf[i:j]
            if event.startswith(b"data: [DONE]"):
                if not self.done.done():
                    self.done.set_result(True)
            elif b'"finish_reason":null' in event:
                self.events.append(now)
            start = j + 2
        self._tail = buf[start:][-4096:]

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result(False)


def request_bytes(port: int, max_tokens: int, i: int) -> bytes:
    body = json.dumps(
        {"model": "mock-llm", "prompt": f"bench {i}", "max_tokens": max_tokens, "stream": True}
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


def level_plan(n: int, steady_s: float, margin_s: float = 0.0) -> tuple[float, int]:
    """(arrival spread, tokens per stream) for N streams: arrivals over max(0.5 s, N/250 s), each
    stream long enough to outlast the spread, its first token and the steady window (+ margin)."""
    spread_s = max(0.5, n / 250.0)
    return spread_s, int(math.ceil((spread_s + TTFT_MS / 1000.0 + 0.3 + steady_s + margin_s) / (ITL_MS / 1000.0)))


def steady_window(spread_s: float, steady_s: float) -> tuple[float, float, float]:
    """(t0, window start, window end) of a level starting now: the window opens once every stream
    has arrived and had its first token. The client's collector is off from here (no collector
    pauses while it timestamps tokens); the level turns it back on."""
    gc.collect()
    gc.disable()
    t0 = time.monotonic()
    window_start = t0 + spread_s + TTFT_MS / 1000.0 + 0.3
    return t0, window_start, window_start + steady_s


async def connect_all(port: int, n: int) -> list[StreamProtocol]:
    loop = asyncio.get_running_loop()
    protos: list[StreamProtocol] = []
    sem = asyncio.Semaphore(200)

    async def one():
        async with sem:
            _, proto = await loop.create_connection(lambda: StreamProtocol(loop), "127.0.0.1", port)
            protos.append(proto)

    await asyncio.gather(*(one() for _ in range(n)))
    return protos


async def lateness_buckets(port: int) -> dict[float, int]:
    """The mock's own token-lateness histogram (cumulative counts by upper bound)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    out: dict[float, int] = {}
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("eppkit_mock_token_lateness_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = int(float(line.rsplit(" ", 1)[1]))
    return out


def bucket_percentile(before: dict[float, int], after: dict[float, int], p: float) -> float:
    """Upper bound (ms) of the bucket holding the p-th percentile of the difference."""
    bounds = sorted(after)
    diff = [after[b] - before.get(b, 0) for b in bounds]
    total = diff[-1] if diff else 0
    if total <= 0:
        return float("nan")
    for bound, cumulative in zip(bounds, diff):
        if cumulative >= p / 100.0 * total:
            return bound * 1000.0
    return float("inf")


def cpu_seconds(pid: int) -> float:
    return procfs.cpu_seconds(pid) or 0.0


async def stream_level(port: int, pid: int, n: int, steady_s: float, timeout: float) -> dict:
    """N streams; timing judged in the steady window, once every stream has started.

    Arrivals are spread over max(0.5 s, N/250 s) so that accepting them does not starve
    the streams already running (each arrival costs the mock about a millisecond of CPU);
    the ramp-up is reported separately (``rampup_*``) but not judged.
    """
    spread_s, tokens = level_plan(n, steady_s, SCRAPE_MARGIN_S)
    protos = await connect_all(port, n)
    rng = random.Random(n)
    t0, window_start, window_end = steady_window(spread_s, steady_s)

    async def fire(i, proto):
        await asyncio.sleep(rng.uniform(0, spread_s))
        proto.send(request_bytes(port, tokens, i))

    async def snapshot(at: float):
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        return time.monotonic(), cpu_seconds(pid), time.process_time(), machine_cpu_seconds(), await lateness_buckets(port)

    # Scraping /metrics costs the mock a few ms of its event loop: do it outside the judged window.
    snap_a = asyncio.ensure_future(snapshot(window_start - SCRAPE_MARGIN_S))
    snap_b = asyncio.ensure_future(snapshot(window_end + SCRAPE_MARGIN_S))
    try:
        await asyncio.gather(*(fire(i, p) for i, p in enumerate(protos)))
        finished = await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), timeout)
        (ta, cpu_a, own_a, box_a, late_a), (tb, cpu_b, own_b, box_b, late_b) = await snap_a, await snap_b
    finally:
        gc.enable()
        snap_a.cancel()
        snap_b.cancel()
    wall = tb - ta
    ttft_errors = [(p.events[0] - p.sent_at) * 1000.0 - TTFT_MS for p in protos if p.events]
    steady, rampup, lateness = [], [], []
    for p in protos:
        ev = p.events
        for a, b in zip(ev, ev[1:]):
            err = abs((b - a) * 1000.0 - ITL_MS)
            (steady if window_start <= a and b <= window_end else rampup if b < window_start else []).append(err)
        lateness.extend(((t - ev[0]) * 1000.0 - k * ITL_MS) for k, t in enumerate(ev) if window_start <= t <= window_end)
        p.transport.close()
    complete = sum(1 for ok, p in zip(finished, protos) if ok and len(p.events) == tokens)
    return {
        "concurrency": n,
        "arrival_spread_s": spread_s,
        "tokens_per_stream": tokens,
        "streams_complete": complete,
        "steady_window_s": round(steady_s, 2),
        "gaps": len(steady),
        "itl_error_p50_ms": percentile(steady, 50),
        "itl_error_p99_ms": percentile(steady, 99),
        "itl_error_max_ms": max(steady) if steady else float("nan"),
        "rampup_itl_error_p99_ms": percentile(rampup, 99),
        "schedule_lateness_p99_ms": percentile(lateness, 99),
        "server_lateness_p50_ms_le": bucket_percentile(late_a, late_b, 50),
        "server_lateness_p99_ms_le": bucket_percentile(late_a, late_b, 99),
        "ttft_error_p50_ms": percentile(ttft_errors, 50),
        "ttft_error_p99_ms": percentile(ttft_errors, 99),
        "tokens_per_s": len(steady) / steady_s,
        "mock_cpu_percent": 100.0 * (cpu_b - cpu_a) / wall if wall > 0 else 0.0,
        "client_cpu_percent": 100.0 * (own_b - own_a) / wall if wall > 0 else 0.0,
        "machine_busy_percent": 100.0 * (box_b["busy"] - box_a["busy"]) / wall if wall > 0 else 0.0,
        "steal_percent": 100.0 * (box_b["steal"] - box_a["steal"]) / wall if wall > 0 else 0.0,
    }


async def ttft_level(port: int, n: int, timeout: float, pid: int | None = None) -> dict:
    protos = await connect_all(port, n)
    await asyncio.sleep(0.2)  # let the server settle after the connection burst
    cpu0 = cpu_seconds(pid) if pid else 0.0
    for i, p in enumerate(protos):
        p.send(request_bytes(port, 2, i))
    await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), timeout)
    cpu = (cpu_seconds(pid) - cpu0) if pid else float("nan")
    errors = [(p.events[0] - p.sent_at) * 1000.0 - TTFT_MS for p in protos if p.events]
    for p in protos:
        p.transport.close()
    return {
        "concurrency": n,
        "answered": len(errors),
        "ttft_error_p50_ms": percentile(errors, 50),
        "ttft_error_p99_ms": percentile(errors, 99),
        "ttft_error_max_ms": max(errors) if errors else float("nan"),
        "mock_cpu_ms_per_request": 1000.0 * cpu / n,
    }


async def timer_floor(seconds: float = 2.0) -> dict:
    """Lateness of a bare asyncio timer every 20 ms in this process: what the machine
    itself allows right now (no mock, no sockets). The mock cannot do better than this."""
    late = []
    t = time.monotonic()
    for _ in range(int(seconds / 0.02)):
        t += 0.02
        await asyncio.sleep(max(0.0, t - time.monotonic()))
        late.append((time.monotonic() - t) * 1000.0)
    gaps = [abs(b - a) for a, b in zip(late, late[1:])]
    return {
        "timer_lateness_p50_ms": percentile(late, 50),
        "timer_lateness_p99_ms": percentile(late, 99),
        "timer_gap_error_p99_ms": percentile(gaps, 99),
    }


def machine() -> dict:
    model, _ = procfs.cpu_model()
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


async def main_async(args) -> dict:
    started = time.monotonic()
    left = lambda: HARD_DEADLINE_S - (time.monotonic() - started)  # noqa: E731
    report: dict = {"machine": machine(), "itl_ms": ITL_MS, "ttft_ms": TTFT_MS, "streams": [], "ttft": []}
    mock_args = [
        "--instance", "bench", "--time-to-first-token", str(TTFT_MS), "--inter-token-latency", str(ITL_MS),
        "--max-num-seqs", "100000", "--max-waiting-queue-length", "100000", "--log-level", "WARNING",
    ]
    report["floor_before"] = await timer_floor()
    print(json.dumps({"floor_before": report["floor_before"]}), flush=True)
    with ServiceProcess("eppkit.services.vllm", mock_args) as mock:
        pid = mock.pid
        # warm-up: imports, first-request paths
        await ttft_level(mock.port, 10, 10)

        for n in args.ttft_levels:
            if left() < 20:
                report["ttft"].append({"concurrency": n, "skipped": "deadline"})
                continue
            report["ttft"].append(await ttft_level(mock.port, n, min(30, left()), pid))
            print(json.dumps(report["ttft"][-1]), flush=True)

        async def level(n: int) -> dict:
            budget = max(0.5, n / 250.0) + args.steady + 15
            if left() < budget + 5:
                return {"concurrency": n, "skipped": "deadline"}
            try:
                result = await stream_level(mock.port, pid, n, args.steady, budget)
            except asyncio.TimeoutError:
                result = {"concurrency": n, "error": "streams did not finish in time"}
            result["passes"] = bool(result.get("itl_error_p99_ms", 1e9) < 5.0 and result.get("streams_complete") == n)
            report["streams"].append(result)
            print(json.dumps(result), flush=True)
            await asyncio.sleep(0.5)
            return result

        # N=1 only gives the single-request TTFT figure; its ~100 gaps say little about p99.
        await level(1)
        best, failed_at, failures = None, None, 0
        for n in [x for x in args.levels if x > 1]:
            result = await level(n)
            if "skipped" in result:
                report["streams"].append(result)
                break
            if result["passes"]:
                best, failures = n, 0
                continue
            failed_at = failed_at or n
            failures += 1
            # machine noise can fail one level and pass the next: stop after two failures
            # in a row, or at once when streams did not even complete
            if failures >= 2 or result.get("streams_complete") != n:
                break
        if best is not None and failed_at is not None and failed_at > best and failed_at - best > 50:
            mid = (best + failed_at) // 2  # one bisection step between the last pass and the first failure
            result = await level(mid)
            if result.get("passes"):
                best = mid
        report["max_streams_within_5ms_p99"] = best
    report["floor_after"] = await timer_floor()
    report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    return report


def render(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}, load average at start {m['loadavg_at_start']}, at end {m.get('loadavg_at_end')}",
        "machine timer floor (bare asyncio timer every 20 ms, no mock): "
        + ", ".join(
            f"{label} lateness p50 {f['timer_lateness_p50_ms']:.2f} / p99 {f['timer_lateness_p99_ms']:.2f} ms, gap error p99 {f['timer_gap_error_p99_ms']:.2f} ms"
            for label, f in (("before", report["floor_before"]), ("after", report["floor_after"]))
        ),
        f"streams at {report['itl_ms']:g} ms inter-token latency, {report['ttft_ms']:g} ms TTFT, arrivals spread over max(0.5 s, N/250 s):",
        "  ITL err = |gap - ITL| at the client in the steady window (all streams started); ramp p99 = the same before it;",
        "  server late = the mock's own lateness in the window (histogram bucket bound); TTFT err over all N requests;",
        "  box busy = the whole machine's CPU (of 200%); steal = time the hypervisor gave this VM's CPUs to others",
        "  N      done  ITL err p50/p99/max ms  ramp p99  server late p50/p99 ms  TTFT err p50/p99 ms  tok/s   mock CPU  client CPU  box busy  steal  pass",
    ]
    for s in sorted(report["streams"], key=lambda r: r["concurrency"]):
        if "itl_error_p99_ms" not in s:
            lines.append(f"  {s['concurrency']:<6} {s.get('skipped') or s.get('error')}")
            continue
        lines.append(
            f"  {s['concurrency']:<6} {s['streams_complete']:>4}  {s['itl_error_p50_ms']:6.2f} {s['itl_error_p99_ms']:6.2f} {s['itl_error_max_ms']:7.2f}"
            f"  {s['rampup_itl_error_p99_ms']:8.2f}   <={s['server_lateness_p50_ms_le']:5.1f} <={s['server_lateness_p99_ms_le']:6.1f}"
            f"      {s['ttft_error_p50_ms']:7.2f} {s['ttft_error_p99_ms']:7.2f}   {s['tokens_per_s']:6.0f}  {s['mock_cpu_percent']:6.0f}%  {s['client_cpu_percent']:8.0f}%  {s['machine_busy_percent']:7.0f}%  {s['steal_percent']:4.0f}%   {'yes' if s['passes'] else 'NO'}"
        )
    lines.append(f"most concurrent streams with client-side ITL error p99 < 5 ms: {report.get('max_streams_within_5ms_p99')}")
    costs = [s["mock_cpu_percent"] / 100.0 / s["tokens_per_s"] * 1e6 for s in report["streams"] if s.get("tokens_per_s", 0) > 1000]
    if costs:
        per_token = min(costs)
        lines.append(
            f"mock CPU per streamed token: {per_token:.0f} us (best level) -> one dedicated core at 80% would carry about "
            f"{0.8 / (per_token / 1e6) / (1000.0 / report['itl_ms']):.0f} streams at {report['itl_ms']:g} ms"
        )
    lines.append(f"TTFT error, burst (N requests written at the same instant on open connections), {report['ttft_ms']:g} ms configured:")
    for t in report["ttft"]:
        if "ttft_error_p50_ms" not in t:
            lines.append(f"  N={t['concurrency']}: {t.get('skipped')}")
            continue
        lines.append(
            f"  N={t['concurrency']:<4} p50 {t['ttft_error_p50_ms']:7.2f} ms  p99 {t['ttft_error_p99_ms']:7.2f} ms  max {t['ttft_error_max_ms']:7.2f} ms"
            f"  (mock CPU {t['mock_cpu_ms_per_request']:.2f} ms per request)"
        )
    lines.append(f"elapsed: {report['elapsed_s']} s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small levels, about 30 s")
    parser.add_argument("--levels", type=int, nargs="+", default=None, help="stream concurrency levels, ascending")
    parser.add_argument("--ttft-levels", type=int, nargs="+", default=[1, 100, 500])
    parser.add_argument("--steady", type=float, default=2.5, help="seconds of steady state judged per level (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args()
    if args.levels is None:
        args.levels = [100, 250, 500] if args.quick else [100, 250, 500, 750, 1000, 1250, 1500]
    if args.quick:
        args.steady = min(args.steady, 1.5)
    report = run_loop(main_async(args))
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
