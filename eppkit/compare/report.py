"""The comparison report: numbers per mode from per-request samples, a console table, Markdown and regressions
against a baseline report (its charts: eppkit.compare.charts).

Everything here works on plain data (the report dict that is also ``report.json``), so a
report can be re-read, re-drawn and compared without any process running.

Layout of a report folder::

    report.json                      every number, and every request (schema ``eppkit.compare/1``)
    summary.md                       tables, charts, links to the representative traces
    report.html                      all of it on one self-contained page, each trace an interactive waterfall
    latency-<scenario>.png/.svg      per-mode distributions (e2e, gateway, TTFT when streamed)
    steps-<scenario>.png/.svg        per-step stacked bars (mean ms per request)
    waterfall-<scenario>-<mode>.png/.svg   the representative trace of each mode
    traces/<scenario>-<mode>-<trace id>.json   that trace as OTLP JSON ({"resourceSpans": [...]},
                                               what Jaeger's /api/v3 answers and its UI's "JSON File" upload reads)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from eppkit import modes
from eppkit.compare import loadmetrics as lm
from eppkit.compare import bands, cachehits, loadtool, promptsizes, sweep
from eppkit.compare import tables
from eppkit.compare.tables import aligned as _aligned
from eppkit.compare.tables import fmt as _f
from eppkit.compare.tables import pct
from eppkit.gateway import hop
from eppkit.observability import steps as st
from eppkit.observability.trace_model import Trace, from_otlp

SCHEMA = "eppkit.compare/1"
OVERHEAD_STEPS = ("e2e", "ttft", "gateway")
# (step, percentile) pairs gated against a baseline: higher is worse.
LATENCY_GATES = (("e2e", "p50"), ("e2e", "p90"), ("ttft", "p50"), ("ttft", "p90"), ("gateway", "p50"),
                 ("gateway", "p90"), ("roundtrip", "p50"), ("decision", "p50"))


def mode_color(mode: str, default: str) -> str:
    """A mode's chart colour: its registry entry's (eppkit.modes.Mode.color); ``default`` for a mode
    the registry does not know (a report from another eppkit version)."""
    try:
        return modes.get(mode).color
    except ValueError:
        return default


PART_COLORS = {"decision": "#d62728", "picker call": "#ff9896", "envoy": "#ffbb78", "encode": "#8c564b",
               "queue": "#c7c7c7", "prefill": "#1f77b4", "kv": "#17becf", "decode": "#aec7e8", "other": "#e7e7e7"}
# -- numbers ------------------------------------------------------------------------------------

def summarize_mode(samples: list[dict], *, planned: int, wall_s: float, stopped: str | None = None) -> dict:
    """A mode's numbers from its request samples.

    Each sample: ``ok`` (bool), ``error`` (kind or None), ``tokens``, ``steps`` ({step: ms}),
    ``complete`` (bool or None when the trace was not checked), ``missing`` (span labels).
    Latencies and completeness are over the successful requests; errors over all sent.
    """
    ok = [s for s in samples if s.get("ok")]
    errors: dict[str, int] = {}
    for s in samples:
        if s.get("error"):
            errors[s["error"]] = errors.get(s["error"], 0) + 1
    values: dict[str, list[float]] = {name: [] for name in st.STEP_NAMES}
    parts: dict[str, list[float]] = {name: [] for name in st.BREAKDOWN}
    hops: dict[str, list[float]] = {name: [] for name in hop.PHASES}
    for s in ok:
        for name, ms in (s.get("hop") or {}).items():
            if name in hops:
                hops[name].append(ms)
        for name, ms in (s.get("steps") or {}).items():
            if name in values and ms is not None:
                values[name].append(ms)
        if s.get("steps"):
            for name, ms in st.breakdown(s["steps"]).items():
                parts[name].append(ms)
    checked = [s for s in ok if s.get("complete") is not None]
    complete = [s for s in checked if s["complete"]]
    missing: dict[str, int] = {}
    for s in checked:
        for label in s.get("missing") or []:
            missing[label] = missing.get(label, 0) + 1
    tokens = sum(s.get("tokens") or 0 for s in ok)
    return {
        "requests": {"planned": planned, "sent": len(samples), "ok": len(ok), "failed": len(samples) - len(ok)},
        "stopped_early": stopped,
        "wall_s": round(wall_s, 3),
        "throughput": {
            "requests_per_s": round(len(ok) / wall_s, 3) if wall_s > 0 else None,
            "output_tokens_per_s": round(tokens / wall_s, 3) if wall_s > 0 else None,
        },
        "errors": dict(sorted(errors.items())),
        "error_rate": round((len(samples) - len(ok)) / len(samples), 4) if samples else None,
        "completeness": {
            "checked": len(checked), "complete": len(complete),
            "ratio": round(len(complete) / len(checked), 4) if checked else None,
            "missing": dict(sorted(missing.items(), key=lambda kv: -kv[1])),
        },
        "steps": {name: st.summarize(v) for name, v in values.items() if v},
        "breakdown_mean_ms": {name: round(sum(v) / len(v), 3) for name, v in parts.items() if v},
        # The EPP hop phase by phase as Envoy recorded each request (eppkit.gateway.hop), any EPP, traced or not.
        "hop": {name: st.summarize(v) for name, v in hops.items() if v},
    }


def add_overheads(modes: dict[str, dict]) -> None:
    """Give every mode ``overhead_vs_direct``: its p50/p90/p99 minus direct's, per step in OVERHEAD_STEPS; and a mode
    with a floor (eppkit.compare.floors) ``over_floor``: the same minus its floor's (what its picker adds). A step of a
    concurrency sweep is set against direct's at the same step."""
    for name, result in modes.items():
        if result.get("status") != "ok":
            continue
        base = modes.get(sweep.key("direct", sweep.split(name)[1]))
        floor = modes.get(result.get("floor") or "")
        if floor is not None and floor.get("status") == "ok":
            result["over_floor"] = {step: {q: _diff(result["steps"][step].get(q), floor["steps"][step].get(q))
                                           for q in ("p50", "p90", "p99")}
                                    for step in OVERHEAD_STEPS if result["steps"].get(step) and floor["steps"].get(step)}
        if base is None or base.get("status") != "ok":
            result["overhead_vs_direct"] = None
            continue
        out = {}
        for step in OVERHEAD_STEPS:
            mine, theirs = result["steps"].get(step), base["steps"].get(step)
            if not mine or not theirs:
                continue
            out[step] = {q: _diff(mine.get(q), theirs.get(q)) for q in ("p50", "p90", "p99")}
        result["overhead_vs_direct"] = out


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def representative(samples: list[dict]) -> dict | None:
    """The successful, complete request whose e2e is nearest the median e2e of those requests."""
    pool = [s for s in samples if s.get("ok") and s.get("complete") and (s.get("steps") or {}).get("e2e") is not None]
    if not pool:
        pool = [s for s in samples if s.get("ok") and (s.get("steps") or {}).get("e2e") is not None]
    if not pool:
        return None
    median = st.percentile([s["steps"]["e2e"] for s in pool], 50)
    return min(pool, key=lambda s: (abs(s["steps"]["e2e"] - median), s.get("index", 0)))


# -- baseline -------------------------------------------------------------------------------------

def compare_to_baseline(report: dict, baseline: dict, *, threshold: float = 0.25, floor_ms: float = 2.0) -> list[dict]:
    """Regressions of ``report`` against ``baseline`` (both report dicts).

    A latency gate (LATENCY_GATES) regresses when it grew by more than ``threshold`` (a
    fraction) *and* by more than ``floor_ms``: sub-millisecond steps jitter by more than
    25 % on a shared machine. Throughput regresses when it fell by more than ``threshold``;
    the error rate when it rose at all; completeness when it fell at all; a mode when it ran
    in the baseline and failed now. Scenarios and modes missing on either side are skipped.
    """
    out: list[dict] = []

    def add(scenario, mode, metric, base, now, why):
        numeric = isinstance(base, (int, float)) and isinstance(now, (int, float))
        change = round((now - base) / base, 4) if numeric and base else None
        out.append({"scenario": scenario, "mode": mode, "metric": metric, "baseline": base, "current": now,
                    "change": change, "rule": why})

    for scenario, block in report.get("scenarios", {}).items():
        base_block = baseline.get("scenarios", {}).get(scenario)
        if not base_block:
            continue
        for mode, now in block.get("modes", {}).items():
            then = base_block.get("modes", {}).get(mode)
            if not then or then.get("status") != "ok":
                continue
            if now.get("status") != "ok":
                add(scenario, mode, "status", "ok", now.get("status"), "ran in the baseline, failed now")
                continue
            for step, q in LATENCY_GATES:
                a = (then.get("steps", {}).get(step) or {}).get(q)
                b = (now.get("steps", {}).get(step) or {}).get(q)
                if a is None or b is None:
                    continue
                if b > a * (1 + threshold) and b - a > floor_ms:
                    add(scenario, mode, f"{step}.{q}_ms", a, b, f"> +{threshold:.0%} and > +{floor_ms:g} ms")
            a = (then.get("throughput") or {}).get("requests_per_s")
            b = (now.get("throughput") or {}).get("requests_per_s")
            if a and b is not None and b < a * (1 - threshold):
                add(scenario, mode, "requests_per_s", a, b, f"< -{threshold:.0%}")
            (lat_then, rate_then), (lat_now, rate_now) = lm.gate_values(then), lm.gate_values(now)
            for metric, b in lat_now.items():
                a = lat_then.get(metric)
                if a is not None and b is not None and b > a * (1 + threshold) and b - a > floor_ms:
                    add(scenario, mode, metric, a, b, f"> +{threshold:.0%} and > +{floor_ms:g} ms")
            for metric, b in rate_now.items():
                a = rate_then.get(metric)
                if a and b is not None and b < a * (1 - threshold):
                    add(scenario, mode, metric, a, b, f"< -{threshold:.0%}")
            a, b = then.get("error_rate") or 0.0, now.get("error_rate") or 0.0
            if b > a:
                add(scenario, mode, "error_rate", a, b, "rose")
            a = (then.get("completeness") or {}).get("ratio")
            b = (now.get("completeness") or {}).get("ratio")
            if a is not None and b is not None and b < a:
                add(scenario, mode, "completeness", a, b, "fell")
    return out


def load(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not an eppkit compare report (schema {data.get('schema')!r}, want {SCHEMA!r})")
    return data


# -- text -------------------------------------------------------------------------------------------

def _q(result: dict, step: str, q: str) -> float | None:
    return (result.get("steps", {}).get(step) or {}).get(q)


def _over(result: dict, step: str, q: str = "p50") -> float | None:
    return ((result.get("overhead_vs_direct") or {}).get(step) or {}).get(q)


def _picker_share(result: dict) -> str:
    """The mode's gateway p50 minus its floor's (what its picker adds over one that costs nothing); "floor" on a
    floor's own row; "–" without one."""
    if str(result.get("scorer")) == "floor":
        return "floor"
    share = ((result.get("over_floor") or {}).get("gateway") or {}).get("p50")
    return "–" if share is None else _f(share, 2, signed=True) + f" ({result['floor']})"


SUMMARY_COLUMNS = ("mode", "status", "ok/sent", "errors", "complete", "req/s", "e2e p50", "p90", "p99",
                   "Δe2e p50", "gateway p50", "Δgateway", "picker share", "decision p50", "roundtrip p50", "ttft p50")


def summary_rows(block: dict) -> list[list[str]]:
    rows = []
    for mode, r in block.get("modes", {}).items():
        if r.get("status") != "ok":
            rows.append([mode, "FAILED", "–", _one_line(r.get("error"))] + ["–"] * (len(SUMMARY_COLUMNS) - 4))
            continue
        req = r["requests"]
        errors = ", ".join(f"{k}×{v}" for k, v in r["errors"].items()) or "0"
        rows.append([
            mode, "ok", f"{req['ok']}/{req['sent']}", errors, pct(r["completeness"]["ratio"]),
            _f(r["throughput"]["requests_per_s"]),
            _f(_q(r, "e2e", "p50")), _f(_q(r, "e2e", "p90")), _f(_q(r, "e2e", "p99")), _f(_over(r, "e2e"), signed=True),
            _f(_q(r, "gateway", "p50"), 2), _f(_over(r, "gateway"), 2, signed=True), _picker_share(r),
            _f(_q(r, "decision", "p50"), 2), _f(_q(r, "roundtrip", "p50"), 2), _f(_q(r, "ttft", "p50")),
        ])
    return rows


def step_table(block: dict) -> tuple[list[str], list[list[str]]]:
    """The modes that ran, and one row per step any of them has: step, then "p50 / p90 / p99" per mode."""
    modes = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok"]
    rows = []
    for step in st.STEP_NAMES:
        cells = []
        for m in modes:
            s = block["modes"][m]["steps"].get(step)
            cells.append("–" if not s else f"{_f(s['p50'], 2)} / {_f(s['p90'], 2)} / {_f(s['p99'], 2)}")
        if any(c != "–" for c in cells):
            rows.append([step] + cells)
    return modes, rows


def extra_tables(report: dict, block: dict) -> list[tables.Table]:
    """A scenario's tables beyond the summary and the steps: the concurrency sweep, the prompt-size curve, the
    priority bands, the prefix-cache hits, the load figures, the load tool's cross-check."""
    slo = lm.Slo.parse((report.get("config") or {}).get("slo") or "")
    return [t for t in (sweep.table(block), promptsizes.table(block), bands.table(block), cachehits.table(block),
                        lm.table(block, slo.text), loadtool.table(block)) if t is not None]


def hop_table(block: dict) -> tuple[list[str], list[list[str]]]:
    """The modes that ran, and one row per phase of the EPP hop any of them has (Envoy's record):
    phase, then "p50 / p90" per mode."""
    modes = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok"]
    rows = []
    for phase in hop.PHASES:
        cells = []
        for m in modes:
            v = (block["modes"][m].get("hop") or {}).get(phase)
            cells.append("–" if not v else f"{_f(v['p50'], 2)} / {_f(v['p90'], 2)}")
        if any(c != "–" for c in cells):
            rows.append([phase] + cells)
    return modes, rows


def _one_line(text: str | None, width: int = 60) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def format_table(report: dict) -> str:
    """The console table: one block per scenario, one row per mode (times in ms)."""
    out = [f"backend: {backend_text(report)}", ""] if report.get("backend") else []
    for scenario, block in report.get("scenarios", {}).items():
        wl = block.get("workload", {})
        out.append(f"scenario {scenario}: {wl.get('requests')} requests per mode, concurrency {wl.get('concurrency')}, "
                   f"{'rate ' + str(wl.get('rate')) + '/s' if wl.get('rate') else 'no rate limit'}, "
                   f"stream={wl.get('stream')}  (times in ms; Δ = minus direct)")
        rows = [list(SUMMARY_COLUMNS)] + summary_rows(block)
        out += _aligned(rows, left=5)
        modes, hop_rows = hop_table(block)
        if hop_rows:
            out.append("  the EPP hop as Envoy recorded it (eppkit.gateway.hop), p50 / p90:")
            out += ["  " + line for line in _aligned([["phase"] + modes] + hop_rows, left=1)]
        for extra in extra_tables(report, block):
            out += [""] + tables.console(extra)
        out.append("")
    regressions = (report.get("baseline") or {}).get("regressions")
    if regressions:
        out.append(f"REGRESSIONS against {report['baseline']['file']}:")
        out += ["  " + _regression_text(r) for r in regressions]
    return "\n".join(out).rstrip() + "\n"


def _regression_text(r: dict) -> str:
    change = "" if r.get("change") is None else f" ({r['change']:+.0%})"
    return f"{r['scenario']}/{r['mode']} {r['metric']}: {r['baseline']} -> {r['current']}{change} [{r['rule']}]"


def backend_text(report: dict) -> str:
    """Who served the requests; for an external backend, which steps its traces cannot show."""
    backend = report.get("backend") or {}
    text = backend.get("label", "the kit's mock vLLM")
    if backend.get("spans") == "none":
        text += " (emits no spans: queue, prefill, kv and decode are not measured; its time is in 'other')"
    elif backend.get("spans") == "llm_request":
        text += (" (one llm_request span per request: queue, prefill and decode are what it reports on it, "
                 "measured inside its engine; kv is not measured)")
    return text


def render_markdown(report: dict) -> str:
    cfg = report.get("config", {})
    latency = cfg.get("latency") or {}  # the mocks' MockLatency, as a dict
    load = cfg.get("load") or cfg  # eppkit.workload.Load, as a dict (reports before it: the config itself)
    lines = [f"# eppkit compare — {report.get('created', '')}", ""]
    if report.get("backend"):
        lines += [f"**Backend:** {backend_text(report)}.", ""]
    lines.append(
        f"Modes {', '.join(cfg.get('modes', []))} on the `{cfg.get('runtime')}` runtime; "
        f"{load.get('requests')} requests per mode and scenario ({load.get('warmup')} warm-up requests not counted), "
        f"concurrency {load.get('concurrency')}, {'rate ' + str(load.get('rate')) + '/s' if load.get('rate') else 'no rate limit'}, "
        f"seed {cfg.get('seed')}. Scorer of every picker mode: `{cfg.get('scorer')}`"
        f"{' ' + json.dumps(cfg['scorer_parameters']) if cfg.get('scorer_parameters') else ''}. "
        f"Mock vLLM: TTFT {latency.get('time_to_first_token')} ms, ITL {latency.get('inter_token_latency')} ms, "
        f"KV transfer {latency.get('kv_cache_transfer_latency')} ms, encode {cfg.get('encode_latency')} ms per item, "
        f"{cfg.get('backends')} backends. "
        f"Machine: {report.get('host', {}).get('cpus')} CPUs, {report.get('host', {}).get('platform', '')}. "
        f"Wall time {report.get('wall_s', 0):.0f} s.")
    lines += ["", "All times in ms, from the Jaeger traces (e2e and TTFT: the client's root span). "
              "*gateway* is Envoy's ingress start to its upstream request start; *Δ* is minus `direct`. "
              "Steps are defined in eppkit's `docs/compare.md` (code: `observability/steps.py`).", ""]
    regressions = (report.get("baseline") or {}).get("regressions")
    if report.get("baseline"):
        b = report["baseline"]
        lines += [f"## Baseline `{b['file']}`", ""]
        if regressions:
            lines += [f"**{len(regressions)} regression(s)** (threshold {b['threshold']:.0%} and {b['floor_ms']:g} ms):", ""]
            lines += ["- " + _regression_text(r) for r in regressions]
        else:
            lines.append(f"No regression (threshold {b['threshold']:.0%} and {b['floor_ms']:g} ms).")
        lines.append("")
    for scenario, block in report.get("scenarios", {}).items():
        lines += [f"## Scenario `{scenario}`", "", block.get("description", ""), ""]
        lines.append("| " + " | ".join(SUMMARY_COLUMNS) + " |")
        lines.append("|" + "|".join("---" if i < 2 else "--:" for i in range(len(SUMMARY_COLUMNS))) + "|")
        for row in summary_rows(block):
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        modes_hop, hop_rows = hop_table(block)
        if hop_rows:
            lines += ["", "The EPP hop as Envoy recorded it (eppkit.gateway.hop: what each phase is), p50 / p90:", ""]
            lines.append("| phase | " + " | ".join(modes_hop) + " |")
            lines.append("|---|" + "|".join("--:" for _ in modes_hop) + "|")
            lines += ["| " + " | ".join(row) + " |" for row in hop_rows]
        lines += ["", "Per step, p50 / p90 / p99:", ""]
        modes, rows = step_table(block)
        lines.append("| step | " + " | ".join(modes) + " |")
        lines.append("|---|" + "|".join("--:" for _ in modes) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        for extra in extra_tables(report, block):
            lines += [""] + tables.markdown(extra)
        incomplete = {m: block["modes"][m]["completeness"]["missing"] for m in modes
                      if block["modes"][m]["completeness"]["missing"]}
        if incomplete:
            lines += ["", "Spans missing from incomplete traces: " + "; ".join(
                f"{m}: " + ", ".join(f"{k}×{v}" for k, v in miss.items()) for m, miss in incomplete.items())]
        charts = block.get("charts", {})
        if charts:
            lines += [""] + [f"![{name}]({path})" for name, path in charts.items()]
        lines += ["", "Representative traces (each mode's request nearest its median e2e):", ""]
        for mode, r in block.get("modes", {}).items():
            rep = r.get("representative")
            if r.get("status") != "ok":
                lines.append(f"- **{mode}**: failed to run — {_one_line(r.get('error'), 200)}"
                             + (f" (logs: `{r['log_file']}`)" if r.get("log_file") else ""))
            elif rep:
                parts = [f"- **{mode}**: trace `{rep['trace_id']}`, e2e {_f(rep.get('e2e_ms'))} ms"]
                if rep.get("file"):
                    parts.append(f"[saved trace JSON]({rep['file']})")
                if rep.get("waterfall"):
                    parts.append(f"[waterfall]({rep['waterfall']})")
                if rep.get("jaeger_url"):
                    parts.append(f"[Jaeger]({rep['jaeger_url']}) (live only during the run)")
                lines.append(" · ".join(parts))
        lines.append("")
    failed = [(s, m, r) for s, b in report.get("scenarios", {}).items() for m, r in b.get("modes", {}).items()
              if r.get("status") != "ok"]
    if failed:
        lines += ["## Modes that failed to run", ""]
        for s, m, r in failed:
            lines += [f"### {s} / {m}", "", "```", (r.get("error") or "").strip()[:3000], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- the folder -------------------------------------------------------------------------------------

def json_default(value: Any):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def save_trace(raw: dict, path: Path) -> Path:
    """Save one trace's OTLP JSON (``{"resourceSpans": [...]}``, as JaegerClient.get_trace_json gives it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw, indent=1))
    return path


def load_trace(path: str | Path) -> Trace:
    return from_otlp(json.loads(Path(path).read_text()))
