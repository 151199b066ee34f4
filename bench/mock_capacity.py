"""How many concurrent streams one mock vLLM process holds on time, and how exact its TTFT is.

Not a test: run it by hand, it stops itself (a hard deadline, under 3 minutes in all).

    python bench/mock_capacity.py            # full run, prints a report
    python bench/mock_capacity.py --quick    # smaller levels, ~30 s
    python bench/mock_capacity.py --json out.json

What it measures, on 127.0.0.1 only:

1. Streaming capacity at 20 ms inter-token latency. For each concurrency level N it
   opens N connections, starts N streaming requests spread over 0.5 s (random phases,
   like real arrivals), and records the arrival time of every token event. The error of
   a gap is |gap - 20 ms|; a level passes when the p99 of that error is under 5 ms.
   The ramp stops at the first failing level. Tokens are timed at the client, so client
   lag counts against the mock: the figures are an upper bound on the mock's own error.
2. TTFT error at 1, 100 and 500 concurrent requests: N connections opened first, then N
   streaming requests written at once; error = (first token arrival - request write) -
   configured TTFT.

The mock runs as its own process (so it has its own GIL), without span export. The
client is a bare asyncio Protocol that only timestamps ``data:`` events, so it costs far
less than the mock per token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.vllm.testing import MockProcess  # noqa: E402

HARD_DEADLINE_S = 170.0
ITL_MS = 20.0
TTFT_MS = 100.0


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
        self.sent_at = self.loop.time()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        now = self.loop.time()
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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def stream_level(port: int, pid: int, n: int, tokens: int, spread_s: float, timeout: float) -> dict:
    loop = asyncio.get_running_loop()
    protos = await connect_all(port, n)
    rng = random.Random(n)
    cpu0, t0 = cpu_seconds(pid), loop.time()

    async def fire(i, proto):
        await asyncio.sleep(rng.uniform(0, spread_s))
        proto.send(request_bytes(port, tokens, i))

    await asyncio.gather(*(fire(i, p) for i, p in enumerate(protos)))
    finished = await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), timeout)
    cpu = cpu_seconds(pid) - cpu0
    wall = loop.time() - t0
    errors, lateness = [], []
    for p in protos:
        ev = p.events
        for a, b in zip(ev, ev[1:]):
            errors.append(abs((b - a) * 1000.0 - ITL_MS))
        if ev:
            lateness.extend(((t - ev[0]) * 1000.0 - k * ITL_MS) for k, t in enumerate(ev))
        p.transport.close()
    complete = sum(1 for ok, p in zip(finished, protos) if ok and len(p.events) == tokens)
    return {
        "concurrency": n,
        "streams_complete": complete,
        "gaps": len(errors),
        "itl_error_p50_ms": percentile(errors, 50),
        "itl_error_p99_ms": percentile(errors, 99),
        "itl_error_max_ms": max(errors) if errors else float("nan"),
        "schedule_lateness_p99_ms": percentile(lateness, 99),
        "tokens_per_s": len(errors) / wall if wall else 0.0,
        "mock_cpu_percent": 100.0 * cpu / wall if wall else 0.0,
    }


async def ttft_level(port: int, n: int, timeout: float) -> dict:
    protos = await connect_all(port, n)
    await asyncio.sleep(0.2)  # let the server settle after the connection burst
    for i, p in enumerate(protos):
        p.send(request_bytes(port, 2, i))
    await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), timeout)
    errors = [(p.events[0] - p.sent_at) * 1000.0 - TTFT_MS for p in protos if p.events]
    for p in protos:
        p.transport.close()
    return {
        "concurrency": n,
        "answered": len(errors),
        "ttft_error_p50_ms": percentile(errors, 50),
        "ttft_error_p99_ms": percentile(errors, 99),
        "ttft_error_max_ms": max(errors) if errors else float("nan"),
    }


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
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
    with MockProcess("services.vllm", mock_args) as mock:
        pid = mock.proc.pid
        # warm-up: imports, first-request paths
        await ttft_level(mock.port, 10, 10)

        for n in args.ttft_levels:
            if left() < 20:
                report["ttft"].append({"concurrency": n, "skipped": "deadline"})
                continue
            report["ttft"].append(await ttft_level(mock.port, n, min(30, left())))
            print(json.dumps(report["ttft"][-1]), flush=True)

        best = None
        for n in args.levels:
            budget = args.tokens * ITL_MS / 1000.0 + 10
            if left() < budget + 5:
                report["streams"].append({"concurrency": n, "skipped": "deadline"})
                break
            try:
                level = await stream_level(mock.port, pid, n, args.tokens, 0.5, budget)
            except asyncio.TimeoutError:
                level = {"concurrency": n, "error": "streams did not finish in time"}
            level["passes"] = bool(level.get("itl_error_p99_ms", 1e9) < 5.0 and level.get("streams_complete") == n)
            report["streams"].append(level)
            print(json.dumps(level), flush=True)
            if level["passes"]:
                best = n
            else:
                break
            await asyncio.sleep(0.5)
        report["max_streams_within_5ms_p99"] = best
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    return report


def render(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}, load average at start {m['loadavg_at_start']}",
        f"streams at {report['itl_ms']:g} ms inter-token latency (error = |gap - ITL|, client-side):",
        "  N      complete  p50 err  p99 err  max err  sched p99  tokens/s  mock CPU  pass",
    ]
    for s in report["streams"]:
        if "itl_error_p99_ms" not in s:
            lines.append(f"  {s['concurrency']:<6} {s.get('skipped') or s.get('error')}")
            continue
        lines.append(
            f"  {s['concurrency']:<6} {s['streams_complete']:>8}  {s['itl_error_p50_ms']:7.2f}  {s['itl_error_p99_ms']:7.2f}  "
            f"{s['itl_error_max_ms']:7.2f}  {s['schedule_lateness_p99_ms']:9.2f}  {s['tokens_per_s']:8.0f}  {s['mock_cpu_percent']:7.0f}%  {'yes' if s['passes'] else 'NO'}"
        )
    lines.append(f"most concurrent streams with p99 error < 5 ms: {report.get('max_streams_within_5ms_p99')}")
    lines.append(f"TTFT error at {report['ttft_ms']:g} ms configured (first token arrival - request write - TTFT):")
    for t in report["ttft"]:
        if "ttft_error_p50_ms" not in t:
            lines.append(f"  N={t['concurrency']}: {t.get('skipped')}")
            continue
        lines.append(f"  N={t['concurrency']:<4} p50 {t['ttft_error_p50_ms']:6.2f} ms  p99 {t['ttft_error_p99_ms']:6.2f} ms  max {t['ttft_error_max_ms']:6.2f} ms")
    lines.append(f"elapsed: {report['elapsed_s']} s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small levels, about 30 s")
    parser.add_argument("--levels", type=int, nargs="+", default=None, help="stream concurrency levels, ascending")
    parser.add_argument("--ttft-levels", type=int, nargs="+", default=[1, 100, 500])
    parser.add_argument("--tokens", type=int, default=150, help="tokens per stream (150 x 20 ms = 3 s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args()
    if args.levels is None:
        args.levels = [100, 250, 500] if args.quick else [100, 250, 500, 750, 1000, 1250, 1500, 2000]
    if args.quick:
        args.tokens = min(args.tokens, 100)
    report = asyncio.run(main_async(args))
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
