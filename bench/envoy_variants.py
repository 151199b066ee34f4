"""Where `direct` Envoy's added latency goes: the same rendered config run as variants.

``python -m bench.envoy_variants [--rate 200] [--rounds 6]`` starts one `direct` testbed
(tracing off, two mocks answering at once), then beside its Envoy a few more Envoys from the
same rendered config with one thing changed each: worker threads (1 or 2), the access log
(on or off), and with ``--pin`` the single-worker ones pinned alone to the last CPU while
vegeta and the mocks keep the others. vegeta drives the floor (the mocks without Envoy) and
each variant in turns, like bench/overhead.py, and a table of added latency over the floor
is printed. Bounded: rounds x variants x 3 s of load, plus start-up.

It answers one question from docs/benchmarks.md (why is Envoy's overhead above 0.3 ms p50
here?) and is not part of ``python -m bench``.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

from bench import tools
from bench.loadgen import Target, Vegeta, merge
from bench.overhead import request, topology
from eppkit.components.launchers import ProcessLauncher
from eppkit.gateway import process as envoy_process
from eppkit.runtimes import create

SLICE_S = 3.0


def without_access_log(config: str) -> str:
    return re.sub(r"\n {10}access_log:\n(?: {10}[ -].*\n)+", "\n", config)


def on_ports(config: str, old: tuple[int, int], new: tuple[int, int]) -> str:
    for o, n in zip(old, new):
        config = config.replace(f"port_value: {o}}}", f"port_value: {n}}}")
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.envoy_variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="requests per second (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=6, help="3-second slices per variant (default: %(default)s)")
    ap.add_argument("--pin", action="store_true", help="single-worker Envoys alone on the last CPU")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 20 or not 1 <= args.rate <= 1000:
        ap.error("--rounds must be 1..20 and --rate 1..1000")

    vegeta_bin = tools.find(tools.VEGETA) or tools.build(tools.VEGETA)
    work = Path(tempfile.mkdtemp(prefix="eppkit-envoy-variants-"))
    vegeta = Vegeta(vegeta_bin, work / "vegeta")
    last_cpu = max(os.sched_getaffinity(0))
    with create(topology("direct", 2, tracing=False), runtime="local") as bed:
        config = Path(bed.envoy_config_path).read_text()
        own_ports = (bed.listen_port, bed.admin_port)
        variants = {"2 workers, access log": (config, 2), "1 worker, access log": (config, 1),
                    "1 worker, no access log": (without_access_log(config), 1)}
        if args.pin:  # this process (so vegeta) and the mocks keep the other CPUs
            others = os.sched_getaffinity(0) - {last_cpu}
            os.sched_setaffinity(0, others)
            for b in bed.services.values():
                if b.process.pid:
                    os.sched_setaffinity(b.process.pid, others)
        body, headers = request("chat")
        targets = {"floor (no Envoy)": [Target(f"http://{b.address}/v1/chat/completions", body, headers)
                                        for b in bed.backends]}
        envoys = []
        try:
            for i, (name, (text, workers)) in enumerate(variants.items()):
                ports = (bed.ports.port(), bed.ports.port())
                path = work / f"envoy-{i}.yaml"
                path.write_text(on_ports(text, own_ports, ports))
                pin = ["taskset", "-c", str(last_cpu)] if args.pin and workers == 1 else []
                launcher = ProcessLauncher(envoy_process.find(), wrapper=pin)
                envoys.append(envoy_process.Envoy(path, work / f"envoy-{i}.log", ports[1], launcher,
                                                  concurrency=workers).start())
                label = name + (", pinned" if pin else "")
                targets[label] = [Target(f"http://127.0.0.1:{ports[0]}/v1/chat/completions", body, headers)]
            for label, tg in targets.items():
                vegeta.attack(tg, rate=50, duration_s=1.0, name="warmup")
            parts: dict[str, list] = {label: [] for label in targets}
            labels = list(targets)
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds} ...", flush=True)
                for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                    parts[label].append(vegeta.attack(targets[label], rate=args.rate, duration_s=SLICE_S, name=f"r{r}"))
                    time.sleep(0.3)
        finally:
            for envoy in envoys:
                envoy.stop()
    results = {label: merge(ps) for label, ps in parts.items()}
    floor = results["floor (no Envoy)"].latency()["p50"]
    print(f"\n{args.rate:g} rps chat, tracing off, {args.rounds} x {SLICE_S:g} s per row; load average {os.getloadavg()[0]:.2f}\n")
    print("| variant | ok / sent | p50 ms | p90 ms | p99 ms | added p50 ms |\n|---|---|---|---|---|---|")
    for label, res in results.items():
        lat = res.latency()
        print(f"| {label} | {res.ok} / {res.sent} | {lat['p50']:.3f} | {lat['p90']:.3f} | {lat['p99']:.3f} | "
              f"{lat['p50'] - floor:+.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
