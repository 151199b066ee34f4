"""`python -m bench`: the benchmark suite in one bounded run (under 10 minutes), written down with its machine.

    python -m bench                  # the suite: overhead per mode, picker cost, tracing cost, mock vs peer
    python -m bench --quick          # smaller (about 3 minutes): rates 50 and 200, fidelity up to 250 streams
    python -m bench --wait-load 1.0  # first wait (up to --wait-max) until the 1-minute load average is below 1

Sections, in order (each skipped with a note when the deadline is near):

1. overhead per mode (tracing on): every mode at each fixed rate, chat and stream; the floor
   (mocks without Envoy) in the direct testbed; decision / round trip / gateway from the traces;
   a closed-loop saturation run against ext_proc;
2. the same at 200 rps with tracing off (and the ext_proc saturation run again);
3. mock fidelity and capacity, the kit's mock vs llm-d-inference-sim.

Writes ``bench/results/<time>.json`` (every number) and ``<time>.md`` (tables, machine, load
average, targets met or missed) and prints the Markdown. vegeta and llm-d-inference-sim are
built once from their Go modules into ~/.cache/eppkit/bin (build time is not counted in the
suite's budget; a peer that cannot build is reported with the error and the suite goes on).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import fidelity, overhead, render, targets, tools
from bench.loadgen import Vegeta
from bench.system import busy_processes, loadavg, machine
from eppkit.components.jaeger import Jaeger
from eppkit.gateway import process as envoy_process
from eppkit.modes import names as mode_names
from eppkit.runtimes.testbed import new_run_dir

RESULTS = Path(__file__).resolve().parent / "results"


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="rates 50 and 200, shorter runs, fidelity up to 250 streams")
    p.add_argument("--modes", default=",".join(mode_names()), help="comma-separated modes (default: all)")
    p.add_argument("--rates", default=None, help="fixed rates, comma-separated (default: 50,200,500)")
    p.add_argument("--no-tracing-off", dest="tracing_off", action="store_false", help="skip the tracing-off runs")
    p.add_argument("--no-fidelity", dest="fidelity", action="store_false", help="skip mock vs peer")
    p.add_argument("--no-peer", dest="peer", action="store_false", help="fidelity: our mock only (no build)")
    p.add_argument("--rounds", type=int, default=3, help="slices per mode and rate, modes in turns (default: %(default)s)")
    p.add_argument("--deadline", type=float, default=570.0, help="seconds for the whole suite (default: %(default)s)")
    p.add_argument("--wait-load", type=float, default=0.0, help="wait until the 1-min load average is below this first")
    p.add_argument("--wait-max", type=float, default=600.0, help="longest wait for --wait-load, seconds (default: %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS, help="results folder (default: bench/results)")
    return p.parse_args(argv)


def wait_for_quiet(threshold: float, max_s: float) -> dict:
    t0 = time.monotonic()
    while loadavg() and loadavg()[0] >= threshold and time.monotonic() - t0 < max_s:
        progress(f"load average {loadavg()} >= {threshold}: waiting ({time.monotonic() - t0:.0f}/{max_s:.0f} s) ...")
        time.sleep(min(30.0, max(1.0, max_s - (time.monotonic() - t0))))
    return {"waited_s": round(time.monotonic() - t0), "threshold": threshold, "reached": loadavg()[0] < threshold}


def main(argv=None) -> int:
    args = parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in mode_names()]
    if bad:
        progress(f"unknown mode(s): {', '.join(bad)}; choose from {', '.join(mode_names())}")
        return 2
    if "direct" not in modes:
        modes = ("direct", *modes)  # every overhead is measured against it
    rates = tuple(float(r) for r in args.rates.split(",")) if args.rates else ((50, 200) if args.quick else (50, 200, 500))

    # Tools first, outside the measured budget.
    try:
        vegeta_bin = tools.build(tools.VEGETA, progress)
    except (tools.BuildFailed, OSError, subprocess.SubprocessError) as exc:
        progress(f"cannot build the load generator: {exc}\nHint: set EPPKIT_VEGETA to a vegeta binary.")
        return 2
    peer_bin, peer_error = None, None
    if args.fidelity and args.peer:
        try:
            peer_bin = tools.build(tools.INFERENCE_SIM, progress)
        except (tools.BuildFailed, OSError, subprocess.SubprocessError) as exc:  # reported; the suite goes on
            peer_error = str(exc)
            progress(f"peer unavailable: {peer_error.splitlines()[0]}")
    waited = wait_for_quiet(args.wait_load, args.wait_max) if args.wait_load > 0 else None

    started = time.monotonic()
    left = lambda: args.deadline - (time.monotonic() - started)  # noqa: E731
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = new_run_dir("bench")
    envoy_bin = envoy_process.find()
    report: dict = {
        "schema": "eppkit.bench/1",
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "other_load": ", ".join(busy_processes()) or "none measurable",
        "waited_for_load": waited,
        "versions": {"envoy": envoy_process.version(envoy_bin) if envoy_bin else None,
                     "vegeta": tools.VEGETA.version, "peer": tools.INFERENCE_SIM.version if peer_bin else None},
        "run_dir": str(run_dir),
    }
    cfg = overhead.OverheadConfig(modes=modes, rates=rates)
    cfg.tracing_off_rates = (targets.JUDGE_RATE,) if targets.JUDGE_RATE in rates else (rates[len(rates) // 2],)
    if args.quick:
        cfg.min_duration_s, cfg.min_requests, cfg.saturation_s = 2.0, 150, 2.0
    levels = (1, 100, 250) if args.quick else (1, 100, 250, 500, 1000)
    steady = 1.0 if args.quick else 2.0
    fidelity_reserve = (45.0 if args.quick else 110.0) if args.fidelity else 0.0
    report["overhead"] = {"config": {"modes": list(modes), "rates": list(rates), "kinds": list(cfg.kinds),
                                     "min_duration_s": cfg.min_duration_s, "min_requests": cfg.min_requests,
                                     "tracing_off_rates": list(cfg.tracing_off_rates),
                                     "saturation_workers": cfg.saturation_workers, "backends": cfg.backends,
                                     "rounds": args.rounds},
                          "runs": []}
    progress(f"eppkit bench: modes {', '.join(modes)}; rates {', '.join(f'{r:g}' for r in rates)} rps; "
             f"load average {loadavg()}; others busy: {report['other_load']}; logs in {run_dir}")
    vegeta = Vegeta(vegeta_bin, run_dir / "vegeta")
    overhead_left = lambda: left() - fidelity_reserve  # noqa: E731
    try:
        with Jaeger(run_dir / "jaeger") as jaeger:
            for tracing, group_rates in ((True, rates), (False, cfg.tracing_off_rates)):
                if not tracing and not args.tracing_off:
                    continue
                progress(f"[{time.monotonic() - started:5.0f} s] overhead, tracing {'on' if tracing else 'off'}")
                group = overhead.run_group(vegeta, jaeger, cfg, modes, tracing=tracing, rates=group_rates,
                                           saturation_modes=("ext_proc",), rounds=args.rounds,
                                           progress=progress, left=overhead_left)
                report["overhead"]["runs"] += [run.to_json() for run in group.runs.values()]
                report["overhead"].setdefault("idle_testbeds_cpu_pct", {})["on" if tracing else "off"] = \
                    group.idle_testbeds_cpu_pct
        if args.fidelity:
            progress(f"[{time.monotonic() - started:5.0f} s] mock fidelity")
            specs = [fidelity.ours()]
            if peer_bin is not None:
                specs.append(fidelity.peer(peer_bin, tools.INFERENCE_SIM.version))
            report["fidelity"] = fidelity.run(specs, levels, steady, run_dir, progress, left)
            if peer_error:
                report["fidelity"]["peer_error"] = peer_error
            elif not args.peer:
                report["fidelity"]["peer_error"] = "skipped (--no-peer)"
    finally:
        report["loadavg_at_end"] = loadavg()
        report["other_load_at_end"] = ", ".join(busy_processes()) or "none measurable"
        report["wall_s"] = round(time.monotonic() - started, 1)
        report["targets"] = targets.evaluate(report)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stamp}.json").write_text(json.dumps(report, indent=1))
        md = render.markdown(report, report["targets"])
        (args.out / f"{stamp}.md").write_text(md + "\n")
        print(md)
        progress(f"written: {args.out / (stamp + '.md')} and .json (wall {report['wall_s']} s)")
    return 0
