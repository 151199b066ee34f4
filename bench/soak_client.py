"""`python -m bench.soak_client`: the EPP verdict's soak (sustained-load's 2,000 requests) sent by the Python client and
by the kit's load client, through the same kind of testbed, with each process's CPU.

The soak judges the EPP: what its client costs is taken from the EPP on 2 cores. Each client sends the soak's own
plan (eppkit.conformance.checks.sustained: short chats, every other pair streamed, HTTP/1.1 and h2c in turn, 32 in
flight) through a testbed of the kit's EPP of its own (three quick mock pods, as the verdict's), and the CPU of
every process of the testbed (/proc: each one's tree), of Jaeger and of the client (this process and its
children) is read before and after. The clients take turns, ``--rounds`` times, so a busy moment of the machine
hits both alike.

    python -m bench.soak_client                 # 2 rounds of 2,000 requests each way (~1 minute)
    python -m bench.soak_client --requests 500 --rounds 1

Writes bench/results/soak-client-<time>.json and prints the Markdown table (docs/benchmarks.md quotes it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from bench.system import loadavg, machine
from eppkit.conformance.checks.sustained import IN_FLIGHT, REQUESTS, _plan
from eppkit.conformance.target import Target
from eppkit.native_load import NativeDriver
from eppkit.observability.client import PROTOCOLS
from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.testbed import new_run_dir
from eppkit.workload import Driver, Load

RESULTS = Path(__file__).resolve().parent / "results"
CLIENTS = ("python", "native")
HZ = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """The CPU (user + system, with its waited-for children) of ``pid`` so far; 0 when it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / HZ


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def _own_cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one(client: str, jaeger, requests: int) -> dict:
    """The soak's plan sent by ``client`` through a new testbed: wall, rate, losses and CPU per process."""
    bed = create(Target("ext_proc").topology(), runtime="local", jaeger=jaeger).start()
    try:
        pids = {name: proc.pid for name, proc in bed.processes().items() if getattr(proc, "pid", None)}
        if jaeger.process is not None:
            pids["jaeger"] = jaeger.process.pid
        trees = {name: _tree(pid) for name, pid in pids.items()}
        before = {name: sum(map(_cpu_s, tree)) for name, tree in trees.items()}
        own = _own_cpu_s()
        load = Load(requests=requests, concurrency=IN_FLIGHT, max_duration_s=300, warmup=0, request_timeout_s=30)
        plan = _plan(bed.backends[0].model, requests)
        started = time.monotonic()
        if client == "python":
            run = Driver(bed.client(pool_size=IN_FLIGHT), load, protocols=PROTOCOLS).run(plan)
        else:
            run = NativeDriver(bed.envoy_url, load, protocols=PROTOCOLS).run(plan)
        wall = time.monotonic() - started
        cpu = {name: round(sum(map(_cpu_s, tree)) - before[name], 2) for name, tree in trees.items()}
        cpu["client"] = round(_own_cpu_s() - own, 2)
        return {"client": client, "sent": len(run.samples), "ok": len(run.ok), "errors": run.errors(),
                "wall_s": round(wall, 2), "per_s": round(len(run.samples) / wall, 1), "cpu_s": cpu,
                "load": loadavg()}
    finally:
        bed.stop()


def table(runs: list[dict]) -> str:
    pods = sorted({k for r in runs for k in r["cpu_s"] if k.startswith("vllm")})
    lines = ["| client | wall | requests/s | lost | CPU (core·s): client | EPP | Envoy | the pods | Jaeger | in all |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in runs:
        cpu = r["cpu_s"]
        lines.append(f"| {r['client']} | {r['wall_s']:.1f} s | {r['per_s']:.0f} | {r['sent'] - r['ok']} | "
                     f"{cpu['client']:.1f} | {cpu.get('epp', 0):.1f} | {cpu.get('envoy', 0):.1f} | "
                     f"{sum(cpu.get(p, 0) for p in pods):.1f} | {cpu.get('jaeger', 0):.1f} | "
                     f"{sum(cpu.values()):.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = []
    with create_jaeger("local", new_run_dir("jaeger-soak-client")) as jaeger:
        for _ in range(args.rounds):
            for client in CLIENTS:
                runs.append(one(client, jaeger, args.requests))
                print(json.dumps(runs[-1]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("soak-client-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps({"machine": machine(), "runs": runs}, indent=1) + "\n")
    print(table(runs))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
