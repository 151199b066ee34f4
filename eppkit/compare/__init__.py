"""`eppkit compare`: the same seeded workload through each integration mode, costs read from the traces.

For each scenario, for each mode in turn: start a testbed (sharing one Jaeger), send a few
warm-up requests (not counted), drive the workload (eppkit.workload), read every request's
trace back, turn it into step durations (eppkit.observability.steps) and a completeness verdict
(eppkit.observability.expected_spans), keep the representative trace, work out what load tools report
(ITL, TPOT, goodput: eppkit.compare.loadmetrics), with ``--load-tool`` send the same requests once more
with inference-perf and set its figures beside the kit's (eppkit.compare.loadtool), stop the testbed.
Then the report (eppkit.compare.report): report.json, summary.md, charts.

A mode that fails to start (or to serve a single request) is reported as failed, with its
error and log tails, and the run goes on with the next mode. Exit codes: 0 ok, 1 a
regression against ``--baseline``, 2 a mode failed to run.
"""

from __future__ import annotations

import argparse
import sys

from eppkit.compare import output
from eppkit.compare import report as rp
from eppkit.compare.options import (
    EXIT_MODE_FAILED,
    EXIT_OK,
    EXIT_REGRESSION,
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_REQUESTS,
    CompareOptions,
    mode_options,
    options_from,
    topology_for,
)
from eppkit.compare.runner import default_out_dir, failed_modes, run, run_mode
from eppkit.compare.traces import collect_traces
from eppkit.core.progress import ProgressLine
from eppkit.workload import SCENARIOS

__all__ = ["EXIT_MODE_FAILED", "EXIT_OK", "EXIT_REGRESSION", "MAX_CONCURRENCY", "MAX_DURATION_S", "MAX_REQUESTS",
           "SCENARIOS", "CompareOptions", "ProgressLine", "collect_traces", "default_out_dir", "failed_modes", "main",
           "mode_options", "options_from", "run", "run_mode", "topology_for"]


# -- command line ---------------------------------------------------------------------------------------

def main(args: argparse.Namespace) -> int:
    options = options_from(args)
    try:
        options.validate()
        baseline = rp.load(args.baseline) if args.baseline else None
    except (ValueError, OSError) as exc:
        print(f"eppkit compare: {exc}", file=sys.stderr)
        return EXIT_MODE_FAILED
    out_dir = args.out or default_out_dir()
    progress = ProgressLine()
    progress.message(f"eppkit compare: {len(options.modes)} mode(s) x {len(options.scenarios)} scenario(s), "
                     f"{options.load.requests} requests each, concurrency {options.load.concurrency}, backend: "
                     f"{options.backend.label}; report in {out_dir}")
    try:
        report = run(options, out_dir, progress=progress, cluster=args.cluster)
    except (OSError, RuntimeError) as exc:  # modes report their own failures; this is Jaeger or the disk
        progress.message(f"eppkit compare: cannot run: {type(exc).__name__}: {exc}")
        return EXIT_MODE_FAILED
    if baseline is not None:
        report["baseline"] = {"file": str(args.baseline), "threshold": args.threshold, "floor_ms": args.threshold_ms,
                              "regressions": rp.compare_to_baseline(report, baseline, threshold=args.threshold,
                                                                    floor_ms=args.threshold_ms)}
    paths = output.write(report, out_dir, charts=options.charts)
    print()
    print(rp.format_table(report))
    print(f"report: {paths['markdown']}\npage: {paths['html']}\nnumbers: {paths['json']}\nwall time {report['wall_s']:.0f} s")
    failed = failed_modes(report)
    if failed:
        print(f"mode(s) failed to run: {', '.join(failed)} (see {paths['markdown']})", file=sys.stderr)
        return EXIT_MODE_FAILED
    if baseline is not None and report["baseline"]["regressions"]:
        return EXIT_REGRESSION
    return EXIT_OK
