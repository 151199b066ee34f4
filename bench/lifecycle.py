"""What one test pays for its testbed: start and stop time per mode, on the local runtime unless ``--runtime`` says.

A user's suite starts a testbed per test (``eppkit_testbed_factory``), so start and stop are the
kit's main cost there. This starts and stops a testbed of each mode ``--rounds`` times, the
way the pytest plugin does: with one Jaeger shared by the session (``--jaeger shared``, the
default) or with a Jaeger of its own each time, as ``eppkit up`` / ``eppkit run`` do
(``--jaeger own``). It also times Jaeger alone (start, and stop after its query API has been
used) and reads Jaeger's log for a clean shutdown, which a SIGKILL would cut short, and one kit service
alone, started both ways (``EPPKIT_SERVICE_START``): its own interpreter (``exec``) and forked from the
session's zygote (``fork``, the default; eppkit.components.zygote): the CPU the service used by the time it was
ready, and the wall time to ready. ``--service-start`` picks the way the testbeds' services start.

    python -m bench.lifecycle                       # every mode, 10 rounds, shared Jaeger
    python -m bench.lifecycle --modes direct --rounds 20 --jaeger own
    python -m bench.lifecycle --json bench/results/lifecycle.json
    python -m bench.lifecycle --service-start exec  # the testbeds' services each in its own interpreter
    python -m bench.lifecycle --runtime kubernetes --rounds 5   # Pods of the one-node cluster (eppkit cluster up)

Jaeger alone and the service alone are timed on the local runtime whatever ``--runtime`` says; the testbeds (and
their shared Jaeger) run on ``--runtime``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.system import loadavg, machine
from eppkit.components.process import ServiceProcess
from eppkit.core import procfs
from eppkit.core.settings import given, settings
from eppkit.runtimes import create, create_jaeger
from eppkit.topology import Topology

MODES = ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout")
CLEAN_SHUTDOWN = "Shutdown complete"  # the OTel collector's last log line when it exits by itself


def pct(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(pct(values, 50), 3), "p90": round(pct(values, 90), 3),
            "max": round(max(values), 3)}


def time_jaeger(rounds: int, work: Path) -> dict:
    """Jaeger alone: start to ready, and SIGINT to exit after its query API answered a few times."""
    starts, stops, clean = [], [], 0
    for i in range(rounds):
        jaeger = create_jaeger("local", work / f"jaeger-{i}")
        t0 = time.perf_counter()
        jaeger.start()
        starts.append(time.perf_counter() - t0)
        for _ in range(3):
            requests.get(f"{jaeger.api_url}/api/services", timeout=5)
        t0 = time.perf_counter()
        jaeger.stop()
        stops.append(time.perf_counter() - t0)
        clean += CLEAN_SHUTDOWN in (work / f"jaeger-{i}" / "jaeger.log").read_text(errors="replace")
    return {"start_s": summary(starts), "stop_s": summary(stops), "clean_shutdowns": f"{clean}/{rounds}"}


def cpu_s(pid: int) -> float:
    """User + system CPU a process has used so far."""
    return procfs.cpu_seconds(pid) or 0.0


def time_service_start(rounds: int, work: Path) -> dict:
    """One kit service (the mock vLLM) started ``rounds`` times each way: its CPU at ready, and the wall time."""
    out = {}
    before = settings().service_start
    try:
        for way in ("exec", "fork"):
            given(service_start=way)  # the kit's settings are read once: this process's, told
            cpus, walls = [], []
            for i in range(rounds):
                proc = ServiceProcess("eppkit.services.vllm", log_dir=work / f"service-{way}-{i}")
                t0 = time.perf_counter()
                with proc:
                    walls.append(time.perf_counter() - t0)
                    cpus.append(cpu_s(proc.pid))
            out[way] = {"cpu_s": summary(cpus), "ready_s": summary(walls)}
    finally:
        given(service_start=before)
    return out


def time_mode(mode: str, rounds: int, jaeger, work: Path, runtime: str = "local") -> dict:
    starts, stops = [], []
    for i in range(rounds):
        bed = create(Topology(mode=mode), runtime=runtime, jaeger=jaeger, run_dir=work / f"{mode}-{i}")
        t0 = time.perf_counter()
        bed.start()
        starts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        bed.stop()
        stops.append(time.perf_counter() - t0)
    return {"start_s": summary(starts), "stop_s": summary(stops)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lifecycle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--jaeger", choices=("shared", "own"), default="shared")
    ap.add_argument("--service-start", choices=("fork", "exec"), default="fork",
                    help="how the testbeds' kit services start (EPPKIT_SERVICE_START; default: %(default)s)")
    ap.add_argument("--runtime", default="local", help="where the testbeds run: local, docker, kubernetes")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    out: dict = {"machine": machine(), "rounds": args.rounds, "jaeger": args.jaeger, "runtime": args.runtime,
                 "modes": {}}
    with tempfile.TemporaryDirectory(prefix="eppkit-lifecycle-") as tmp:
        work = Path(tmp)
        out["jaeger_alone"] = time_jaeger(min(args.rounds, 5), work)
        out["service_alone"] = time_service_start(args.rounds, work)
        for way, figures in out["service_alone"].items():
            print(f"{'vllm, ' + way:<15} CPU at ready p50 {figures['cpu_s']['p50']:.3f} s   ready p50 "
                  f"{figures['ready_s']['p50']:.2f} s p90 {figures['ready_s']['p90']:.2f} s", flush=True)
        out["service_start"] = given(service_start=args.service_start).service_start
        shared = create_jaeger(args.runtime, work / "jaeger-shared").start() if args.jaeger == "shared" else None
        try:
            for mode in modes:
                out["modes"][mode] = time_mode(mode, args.rounds, shared, work, args.runtime)
                print(f"{mode:<15} start p50 {out['modes'][mode]['start_s']['p50']:.2f} s "
                      f"p90 {out['modes'][mode]['start_s']['p90']:.2f} s   stop p50 "
                      f"{out['modes'][mode]['stop_s']['p50']:.2f} s p90 {out['modes'][mode]['stop_s']['p90']:.2f} s",
                      flush=True)
        finally:
            if shared is not None:
                shared.stop()
    out["loadavg_at_end"] = loadavg()
    ja = out["jaeger_alone"]
    print(f"{'jaeger alone':<15} start p50 {ja['start_s']['p50']:.2f} s   stop p50 {ja['stop_s']['p50']:.2f} s "
          f"p90 {ja['stop_s']['p90']:.2f} s   clean shutdowns {ja['clean_shutdowns']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
