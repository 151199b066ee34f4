"""The suite's Markdown: machine, tables, and each target with its measured figure, met or missed."""

from __future__ import annotations

from typing import Any

from bench.figures import attacks, delta, latency, step

MODE_ORDER = ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout")


def f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        return f"{v:.{digits}f}"
    return str(v)


def _cpu(a: dict, names) -> str:
    """Summed CPU % of the processes whose names start with one of ``names``; "–" when none ran."""
    hits = [v["cpu_pct"] for k, v in (a.get("cpu") or {}).items() if any(k.startswith(n) for n in names)]
    return f"{sum(hits):.0f}%" if hits else "–"


def overhead_tables(report: dict) -> list[str]:
    lines: list[str] = []
    on = attacks(report, tracing=True)
    floor = attacks(report, tracing=True, target="floor")
    config = report.get("overhead", {}).get("config", {})
    kinds, rates = config.get("kinds", []), config.get("rates", [])
    idle = report.get("overhead", {}).get("idle_testbeds_cpu_pct", {})
    if config:
        lines += [f"Every mode's testbed up at once ({config.get('backends')} mock vLLMs each, TTFT 0, ITL 0), measured in "
                  f"turns: {config.get('rounds')} slices per mode and rate, the order rotating each round, slices merged. "
                  f"The idle testbeds cost {idle.get('on', '–')}% of one core in all (tracing on; off: "
                  f"{idle.get('off', '–')}%) while one is measured.", ""]
    for kind in kinds:
        lines += [f"#### {kind}: latency at fixed rates (tracing on)", "",
                  "Δ = minus `direct` at the same rate (for `direct`: minus the floor, i.e. the mocks hit without Envoy). "
                  "Decision / round trip from the traces (up to 1,000 per run). CPU in % of one core during the run.", "",
                  "| mode | rps | ok / sent | p50 | p99 | Δp50 | Δp99 | decision p50 / p99 | round trip p50 / p99 | gateway p50 | picker CPU | Envoy CPU | mocks CPU | vegeta CPU | load 1m |",
                  "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for rate in rates:
            fl = floor.get(("direct", kind, rate))
            if fl:
                lines.append(f"| *floor (no Envoy)* | {rate:g} | {fl['ok']} / {fl['sent']} | {f(latency(fl, 'p50'))} | {f(latency(fl, 'p99'))} "
                             f"| | | | | | | | {_cpu(fl, ('vllm',))} | {fl['generator_cpu_pct']:.0f}% | {f(fl['loadavg'][0] if fl.get('loadavg') else None)} |")
            base = on.get(("direct", kind, rate))
            for mode in MODE_ORDER:
                a = on.get((mode, kind, rate))
                if not a:
                    continue
                ref = fl if mode == "direct" else base
                lines.append(
                    f"| {mode} | {rate:g} | {a['ok']} / {a['sent']} | {f(latency(a, 'p50'))} | {f(latency(a, 'p99'))} "
                    f"| {f(delta(a, ref, 'p50'))} | {f(delta(a, ref, 'p99'))} "
                    f"| {f(step(a, 'decision', 'p50'))} / {f(step(a, 'decision', 'p99'))} "
                    f"| {f(step(a, 'roundtrip', 'p50'))} / {f(step(a, 'roundtrip', 'p99'))} | {f(step(a, 'gateway', 'p50'))} "
                    f"| {_cpu(a, ('epp', 'frontend', 'callout'))} | {_cpu(a, ('envoy',))} | {_cpu(a, ('vllm',))} "
                    f"| {a['generator_cpu_pct']:.0f}% | {f(a['loadavg'][0] if a.get('loadavg') else None)} |")
        lines.append("")
    return lines


def tracing_table(report: dict) -> list[str]:
    on, off = attacks(report, tracing=True), attacks(report, tracing=False)
    fl_on, fl_off = attacks(report, tracing=True, target="floor"), attacks(report, tracing=False, target="floor")
    rows = []
    for (mode, kind, rate), b in sorted(off.items(), key=lambda kv: (kv[0][1], kv[0][2], MODE_ORDER.index(kv[0][0]))):
        a = on.get((mode, kind, rate))
        d_on = delta(a, on.get(("direct", kind, rate)) if mode != "direct" else fl_on.get(("direct", kind, rate)), "p50")
        d_off = delta(b, off.get(("direct", kind, rate)) if mode != "direct" else fl_off.get(("direct", kind, rate)), "p50")
        rows.append(f"| {mode} | {kind} | {rate:g} | {f(latency(a, 'p50'))} | {f(latency(b, 'p50'))} | {f(delta(a, b, 'p50'))} "
                    f"| {f(latency(a, 'p99'))} | {f(latency(b, 'p99'))} | {f(delta(a, b, 'p99'))} | {f(d_on)} | {f(d_off)} |")
    if not rows:
        return []
    return ["#### Tracing on vs off", "",
            "Same testbed, same load; off = Envoy without a tracer, services with OTEL_SDK_DISABLED (no spans at all). "
            "Last two columns: added latency p50 over `direct` (for `direct`: over the floor) with tracing on / off.", "",
            "| mode | kind | rps | p50 on | p50 off | Δ | p99 on | p99 off | Δ | added p50 on | added p50 off |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|", *rows, ""]


def picker_table(report: dict) -> list[str]:
    rows, sat = [], []
    for run in report.get("overhead", {}).get("runs", []):
        for a in run["attacks"]:
            p = a.get("picker")
            if not p or "skipped" in a:
                continue
            if a.get("saturation"):
                sat.append(f"| {run['mode']} | {'on' if run['tracing'] else 'off'} | {a['workers']} | {a['achieved_rps']:.0f} "
                           f"| {f(latency(a, 'p50'))} / {f(latency(a, 'p99'))} | {p['cpu_pct']:.0f}% | {_cpu(a, ('envoy',))} "
                           f"| {_cpu(a, ('vllm',))} | {a['generator_cpu_pct']:.0f}% | {p['cpu_ms_per_decision']:.2f} |")
                continue
            if a["kind"] != "chat":
                continue
            per = p["cpu_ms_per_decision"]
            rows.append(f"| {run['mode']} | {' + '.join(p['processes'])} | {'on' if run['tracing'] else 'off'} | {a['rate']:g} "
                        f"| {per:.2f} | {per:.2f} | {p['cpu_pct']:.0f}% | {1000.0 / per if per > 0 else 0:.0f} |")
    out = []
    if rows:
        out += ["#### Picker CPU per decision (chat requests)", "",
                "CPU of the picker processes during the run, minus their idle background (metrics scrapes), divided "
                "by the requests answered. *Ceiling* = 1,000 / (ms per decision): decisions per second one fully "
                "busy core could make.", "",
                "| mode | processes | tracing | rps | CPU ms / decision | CPU s / 1,000 decisions | picker CPU | ceiling / s |",
                "|---|---|---|--:|--:|--:|--:|--:|", *rows, ""]
    if sat:
        out += ["#### Saturation: closed loop, N requests in flight (chat)", "",
                "| mode | tracing | in flight | achieved rps | p50 / p99 ms | picker CPU | Envoy CPU | mocks CPU | vegeta CPU | picker ms / decision |",
                "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|", *sat, ""]
    return out


def fidelity_tables(report: dict) -> list[str]:
    fid = report.get("fidelity")
    if not fid:
        return []
    lines = [f"#### Mock fidelity and capacity ({fid['ttft_ms']:g} ms TTFT, {fid['itl_ms']:g} ms inter-token latency, streaming /v1/completions)", ""]
    for label in ("floor_before", "floor_after"):
        fl = fid.get(label)
        if fl:
            lines.append(f"- machine timer floor {label.split('_')[1]} (a bare asyncio timer every 20 ms, no mock): "
                         f"lateness p50 {fl['timer_lateness_p50_ms']:.2f} ms, p99 {fl['timer_lateness_p99_ms']:.2f} ms, "
                         f"gap error p99 {fl['timer_gap_error_p99_ms']:.2f} ms")
    if fid.get("peer_error"):
        lines.append(f"- peer not run: {fid['peer_error']}")
    lines += ["", "ITL err = |gap − ITL| in the steady window; drift = mean of (gap − ITL), signed; rate = tokens delivered "
              "per second / (N × 1000 / ITL). On time: all complete, ITL err p99 < 5 ms. Pace: all complete, rate ≥ 95 %, "
              "ITL err p50 < 5 ms.", "",
              "| mock | streams | complete | TTFT err p50 / p99 ms | ITL err p50 / p99 / max ms | drift ms | rate | mock CPU | client CPU | RSS / peak MiB | on time | pace | load 1m |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|--:|"]
    for m in fid["mocks"]:
        if m.get("error"):
            lines.append(f"| {m['mock']} | | | failed: {m['error'].splitlines()[0][:150]} | | | | | | | |")
            continue
        for r in m["levels"]:
            if "skipped" in r:
                lines.append(f"| {m['mock']} | {r['streams']} | skipped ({r['skipped']}) | | | | | | | | | | |")
                continue
            lines.append(
                f"| {m['mock']} | {r['streams']} | {r['complete']} | {f(r['ttft_error_p50_ms'])} / {f(r['ttft_error_p99_ms'])} "
                f"| {f(r['itl_error_p50_ms'])} / {f(r['itl_error_p99_ms'])} / {f(r['itl_error_max_ms'])} "
                f"| {f(r.get('itl_mean_error_ms'))} | {f(r.get('rate_pct'), 0)}% "
                f"| {f(r['mock_cpu_pct'], 0)}% | {f(r['client_cpu_pct'], 0)}% | {f(r['rss_mib'], 0)} / {f(r['peak_rss_mib'], 0)} "
                f"| {'yes' if r['held'] else 'no'} | {'yes' if r.get('keeps_pace') else 'no'} | {f(r['loadavg'][0])} |")
    lines.append("")
    for m in fid["mocks"]:
        if not m.get("error"):
            lines.append(f"- {m['mock']} ({m['note']}): most streams kept pace with **{m.get('max_streams_keeping_pace')}**, "
                         f"held on time **{m['max_streams_held']}**, of levels up to {m['highest_level_tried']}; "
                         f"idle RSS {m.get('idle', {}).get('rss_mib')} MiB")
    lines.append("")
    return lines


def targets_table(targets: list[dict]) -> list[str]:
    lines = ["| target | measured | ratio / figure | verdict | why |", "|---|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['target']} | {t['measured']} | {t.get('figure', '')} | **{t['verdict']}** | {t.get('why', '')} |")
    return lines + [""]


def markdown(report: dict, targets: list[dict]) -> str:
    m = report["machine"]
    lines = [f"# eppkit benchmarks — {report['created']}", "",
             f"**Machine:** {m['cpus']} CPUs ({m['cpu_model']}, {m['cpu_mhz']} MHz), {m['memory_gib']} GiB, "
             f"Linux {m['kernel']}, Python {m['python']}; Envoy {report['versions'].get('envoy')}, "
             f"vegeta {report['versions'].get('vegeta')}, peer {report['versions'].get('peer')}. "
             f"**Load average** (1/5/15 min) at start {m['loadavg_at_start']}, at end {report.get('loadavg_at_end')}; "
             f"other processes busy at start: {report.get('other_load', 'unknown')}; at end: "
             f"{report.get('other_load_at_end', 'unknown')}. During the run the suite itself is most of the load "
             f"(about 20 processes on 2 cores): each table row carries the 1-minute load average at its run.", "",
             f"Command: `{report['command']}` — wall time {report.get('wall_s')} s. "
             "All figures in ms unless marked; every request on 127.0.0.1.", "",
             "## Targets", "", *targets_table(targets),
             "## Overhead per mode", "", *overhead_tables(report), *tracing_table(report),
             "## The picker's own cost", "", *picker_table(report),
             "## Mock fidelity against llm-d-inference-sim", "", *fidelity_tables(report)]
    failures = [f"- {r['mode']} (tracing {'on' if r['tracing'] else 'off'}): {r['error']}"
                for r in report.get("overhead", {}).get("runs", []) if r.get("error")]
    if failures:
        lines += ["## Runs that failed", "", *failures, ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m bench.render bench/results/<time>.json``: the Markdown again, targets re-judged."""
    import json
    import sys
    from pathlib import Path

    from bench.targets import evaluate

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.render <results .json>", file=sys.stderr)
        return 2
    report = json.loads(Path(args[0]).read_text())
    print(markdown(report, evaluate(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
