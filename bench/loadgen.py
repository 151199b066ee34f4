"""Fixed-rate open-loop load with vegeta: every request's latency, measured by the generator.

Why vegeta (docs/benchmarks.md): a Python client cannot hold 500 requests per second on 2
cores, and a closed-loop client (send the next request when one returns) hides queueing:
when the system slows down it simply sends less. vegeta sends on a fixed schedule whatever
the answers do (it starts more workers when requests are slow), measures each latency from
the moment the request was sent to the end of the response body, and costs little CPU
(its own CPU is measured and reported with every run).
"""

from __future__ import annotations

import base64
import csv
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from eppkit.observability.steps import percentile


@dataclass(frozen=True)
class Target:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        header = {"Content-Type": ["application/json"], **{k: [v] for k, v in self.headers.items()}}
        return json.dumps({"method": "POST", "url": self.url, "body": base64.b64encode(self.body).decode(),
                           "header": header})


@dataclass
class AttackResult:
    name: str
    rate: float  # asked, per second; 0 = as fast as max_workers allow
    duration_s: float
    sent: int = 0
    ok: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)  # successful requests only
    start_unix: float = 0.0  # wall clock, for span queries
    end_unix: float = 0.0
    wall_s: float = 0.0
    generator_cpu_pct: float = 0.0  # vegeta's own CPU, % of one core
    meter_wall_s: float = 0.0  # the time CPU was measured over: the whole vegeta process, start to exit
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # per component during the attack

    @property
    def achieved_rps(self) -> float:
        return self.ok / self.wall_s if self.wall_s > 0 else 0.0

    def latency(self) -> dict:
        xs = self.latencies_ms

        def r(v):
            return None if v is None else round(v, 3)

        return {"n": len(xs), "p50": r(percentile(xs, 50)), "p90": r(percentile(xs, 90)),
                "p99": r(percentile(xs, 99)), "max": r(max(xs)) if xs else None,
                "mean": r(sum(xs) / len(xs)) if xs else None}

    windows: list[tuple[float, float]] = field(default_factory=list)  # (start_unix, end_unix) of each slice

    def to_json(self) -> dict:
        return {"name": self.name, "rate": self.rate, "duration_s": self.duration_s, "sent": self.sent,
                "ok": self.ok, "codes": self.codes, "errors": self.errors, "latency_ms": self.latency(),
                "achieved_rps": round(self.achieved_rps, 1), "wall_s": round(self.wall_s, 3),
                "start_unix": self.start_unix, "end_unix": self.end_unix,
                "windows": self.windows or [(self.start_unix, self.end_unix)],
                "generator_cpu_pct": self.generator_cpu_pct, "meter_wall_s": round(self.meter_wall_s, 3),
                "cpu": self.cpu}


def merge(parts: list[AttackResult]) -> AttackResult:
    """Slices of one measurement (same target, rate and kind, run in turns with other modes) as one result."""
    first = parts[0]
    out = AttackResult(name=first.name, rate=first.rate, duration_s=round(sum(p.duration_s for p in parts), 3))
    cpu_s: dict[str, float] = {}
    gen_cpu = 0.0
    for p in parts:
        out.sent += p.sent
        out.ok += p.ok
        for k, v in p.codes.items():
            out.codes[k] = out.codes.get(k, 0) + v
        for k, v in p.errors.items():
            out.errors[k] = out.errors.get(k, 0) + v
        out.latencies_ms.extend(p.latencies_ms)
        out.wall_s += p.wall_s
        out.meter_wall_s += p.meter_wall_s
        out.windows.append((p.start_unix, p.end_unix))
        gen_cpu += p.generator_cpu_pct * p.meter_wall_s
        for name, c in p.cpu.items():
            cpu_s[name] = cpu_s.get(name, 0.0) + c["cpu_s"]
    out.start_unix, out.end_unix = min(p.start_unix for p in parts), max(p.end_unix for p in parts)
    wall = max(1e-6, out.meter_wall_s)
    out.generator_cpu_pct = round(gen_cpu / wall, 1)
    out.cpu = {name: {"cpu_s": round(s, 3), "cpu_pct": round(100.0 * s / wall, 1)} for name, s in cpu_s.items()}
    return out


class Vegeta:
    def __init__(self, binary: Path, workdir: Path):
        self.binary = str(binary)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._n = 0

    def attack(self, targets: list[Target], *, rate: float, duration_s: float, name: str,
               timeout_s: float = 10.0, max_workers: int | None = None, meter=None) -> AttackResult:
        """Send ``rate`` requests per second for ``duration_s`` (round robin over ``targets``).

        ``rate=0`` sends as fast as ``max_workers`` concurrent requests allow (closed loop, for
        saturation). ``meter``: a bench.system.CpuMeter, started and stopped around the attack.
        """
        self._n += 1
        stem = self.workdir / f"{self._n:03d}-{name}"
        targets_file = stem.with_suffix(".targets.json")
        targets_file.write_text("".join(t.to_json() + "\n" for t in targets))
        results_file = stem.with_suffix(".bin")
        argv = [self.binary, "attack", "-format=json", f"-targets={targets_file}", f"-duration={duration_s}s",
                f"-timeout={timeout_s}s", "-max-body=0", "-http2=false", f"-output={results_file}", f"-name={name}"]
        if rate > 0:
            argv.append(f"-rate={rate:g}/1s")
            if max_workers:
                argv.append(f"-max-workers={max_workers}")
        else:
            workers = max_workers or 16
            argv += ["-rate=0", f"-max-workers={workers}", f"-workers={workers}"]
        out = AttackResult(name=name, rate=rate, duration_s=duration_s)
        out.start_unix = time.time()
        t0 = time.monotonic()
        if meter is not None:
            meter.start(t0)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        t1 = time.monotonic()
        out.meter_wall_s = t1 - t0
        if meter is not None:
            out.cpu = meter.stop(t1)
        out.end_unix = time.time()
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode != 0:
            raise RuntimeError(f"vegeta attack failed ({proc.returncode}): {stderr[-1000:]}")
        out.generator_cpu_pct = round(100.0 * (usage.ru_utime + usage.ru_stime) / max(1e-6, out.meter_wall_s), 1)
        self._read(results_file, out)
        return out

    def _read(self, results_file: Path, out: AttackResult) -> None:
        enc = subprocess.run([self.binary, "encode", "-to", "csv", str(results_file)], capture_output=True,
                             text=True, timeout=60)
        if enc.returncode != 0:
            raise RuntimeError(f"vegeta encode failed: {enc.stderr[-500:]}")
        first = last = None
        for row in csv.reader(enc.stdout.splitlines()):
            # timestamp ns, code, latency ns, bytes out, bytes in, error, body, name, seq, method, url, headers
            ts, code, lat_ns, err = int(row[0]), row[1], int(row[2]), row[5]
            out.sent += 1
            out.codes[code] = out.codes.get(code, 0) + 1
            end = ts + lat_ns
            first = ts if first is None else min(first, ts)
            last = end if last is None else max(last, end)
            if code == "200" and not err:
                out.ok += 1
                out.latencies_ms.append(lat_ns / 1e6)
            else:
                key = (err or f"HTTP {code}")[:120]
                out.errors[key] = out.errors.get(key, 0) + 1
        out.wall_s = (last - first) / 1e9 if first is not None and last is not None else 0.0
        results_file.unlink(missing_ok=True)
