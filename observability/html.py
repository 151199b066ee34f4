"""Traces and compare reports as self-contained HTML pages: one file, no network, no server.

A page opens from a CI artifact or a run folder as it is. Jinja2 renders it from the templates
beside this module (``templates/``); the stylesheet and the small script are inlined, charts are
embedded as data URIs, and each trace is an interactive waterfall drawn as plain SVG bars:

- one row per span in tree order, on a shared time axis, coloured by service; diamonds mark
  span events (``first_token`` ...); a failed span has a red outline;
- the picker's decision span, Envoy's call to the picker and Envoy's upstream request are
  highlighted (their definitions are :mod:`eppkit.observability.expected_spans`');
- hovering a row names it, clicking it opens its details: attributes, events, resource,
  status; ▾ folds a span's children away;
- ``#span=<span id>`` in the URL opens that span (a link into a CI artifact).

Everything works on the trace model, so the page does not care how a trace was read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import jinja2
from markupsafe import Markup

from eppkit.observability import expected_spans as ex
from eppkit.observability import report as rp
from eppkit.observability import steps as st
from eppkit.observability import waterfall
from eppkit.observability.trace_model import Span, Trace

TEMPLATES = Path(__file__).parent / "templates"
REPORT_PAGE = "report.html"
_FALLBACK_COLORS = ("#17becf", "#bcbd22", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2")
_KIND_NAMES = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
MODE_ATTRIBUTE = "eppkit.mode"  # the traced client and Envoy tag each span with the testbed's mode


@dataclass
class TraceView:
    """One trace on a page, with a heading and links (label, href) shown above its waterfall."""

    trace: Trace
    title: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""
    mode: str | None = None  # the integration mode; default: the spans' eppkit.mode attribute


# -- one trace as rows ---------------------------------------------------------------------------

def service_color(service: str) -> str:
    """The service's colour in every chart and page of the kit; unknown services get a stable one."""
    if service in rp.SERVICE_COLORS:
        return rp.SERVICE_COLORS[service]
    return _FALLBACK_COLORS[int(hashlib.sha1(service.encode()).hexdigest(), 16) % len(_FALLBACK_COLORS)]


def _roles(mode: str | None) -> tuple[tuple[str, str, tuple], ...]:
    """(role, its label, the rules that find its spans) in the order a request meets them.

    In a known mode only that mode's decision counts (in sidecar the EPP's epp.pick only relays
    the frontend's decision); otherwise any mode's.
    """
    pickers = ex.picker_modes()

    def of(rule_of) -> tuple:
        return (rule_of(mode),) if mode in pickers else (() if mode else tuple({rule_of(m) for m in pickers}))

    return (("picker-call", "picker call", of(ex.picker_call)), ("decision", "decision", of(ex.decision)),
            ("upstream", "upstream", (ex.UPSTREAM,)))


def _role(span: Span, roles) -> tuple[str, str]:
    for role, label, rules in roles:
        if any(rule.matches(span) for rule in rules):
            return role, label
    return "", ""


def trace_mode(trace: Trace) -> str | None:
    return next((s.attributes[MODE_ATTRIBUTE] for s in trace.spans if s.attributes.get(MODE_ATTRIBUTE)), None)


def _display_name(name: str) -> str:
    # The text waterfall's display abbreviations of long Envoy span names (the title keeps the full name).
    for long, short in waterfall._SHORT.items():
        name = name.replace(long, short)
    return name


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _pct(us: float, total_us: float) -> float:
    return round(100.0 * us / total_us, 3)


def tree_order(trace: Trace) -> list[tuple[Span, int]]:
    """(span, depth) in tree order: each span followed by its children, by start time."""
    out: list[tuple[Span, int]] = []

    def visit(span: Span, depth: int) -> None:
        out.append((span, depth))
        for child in sorted(span.children, key=lambda s: s.start_us):
            visit(child, depth + 1)

    for root in sorted(trace.roots, key=lambda s: s.start_us):
        visit(root, 0)
    return out


def ticks(total_ms: float, target: int = 6) -> list[tuple[float, str]]:
    """Round time-axis ticks (1, 2 or 5 times a power of ten ms) as (percent from the left, label)."""
    if total_ms <= 0:
        return [(0.0, "0 ms")]
    raw = total_ms / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    out, t = [], 0.0
    while t <= total_ms + 1e-9:
        out.append((round(100.0 * t / total_ms, 3), f"{t:g} ms" if step >= 1 else f"{t:.{-math.floor(math.log10(step))}f} ms"))
        t += step
    return out


def waterfall_rows(trace: Trace, mode: str | None = None) -> list[dict]:
    """What the template draws for each span: position and size in percent, details, role."""
    roles = _roles(mode or trace_mode(trace))
    t0 = trace.start_us
    total = max(trace.end_us - t0, 1)
    rows = []
    paths: dict[str, str] = {}
    for span, depth in tree_order(trace):
        parent_path = paths.get(span.parent.span_id) if span.parent is not None else None
        paths[span.span_id] = f"{parent_path}/{span.span_id}" if parent_path else span.span_id
        role, role_label = _role(span, roles)
        kind = getattr(span, "kind", 0) or span.attributes.get("span.kind", "")
        status_message = getattr(span, "status_message", "") or span.attributes.get("otel.status_description", "")
        rows.append({
            "span": span,
            "id": span.span_id,
            "path": paths[span.span_id],
            "depth": depth,
            "has_children": bool(span.children),
            "name": _display_name(span.name),
            "color": service_color(span.service),
            "left": _pct(span.start_us - t0, total),
            "width": max(_pct(span.duration_us, total), 0.2),
            "offset_ms": (span.start_us - t0) / 1000,
            "duration_ms": span.duration_ms,
            "role": role,
            "role_label": role_label,
            "kind": _KIND_NAMES.get(kind, str(kind)) if kind else "",
            "status": ("ERROR" + (f": {status_message}" if status_message else "")) if span.error else "OK",
            "attributes": sorted((k, _value(v)) for k, v in span.attributes.items()),
            "resource": sorted((k, _value(v)) for k, v in span.resource.items()),
            "events": [{"name": ev.name, "left": _pct(ev.time_us - t0, total), "offset_ms": (ev.time_us - t0) / 1000,
                        "in_span_ms": (ev.time_us - span.start_us) / 1000,
                        "attributes": sorted((k, _value(v)) for k, v in ev.attributes.items())}
                       for ev in span.events],
        })
    return rows


def trace_context(view: TraceView | Trace) -> dict:
    """Everything the waterfall macro needs for one trace."""
    view = view if isinstance(view, TraceView) else TraceView(view)
    trace = view.trace
    counts: dict[str, int] = {}
    for span in trace.spans:
        counts[span.service] = counts.get(span.service, 0) + 1
    total_ms = (trace.end_us - trace.start_us) / 1000 if trace.spans else 0.0
    return {
        "trace_id": trace.trace_id,
        "title": view.title or f"trace {trace.trace_id}",
        "links": view.links,
        "note": view.note,
        "span_count": len(trace.spans),
        "total_ms": total_ms,
        "services": [(name, service_color(name), n) for name, n in sorted(counts.items())],
        "errors": sum(1 for s in trace.spans if s.error),
        "ticks": ticks(total_ms),
        "rows": waterfall_rows(trace, view.mode) if trace.spans else [],
    }


# -- pages ---------------------------------------------------------------------------------------

def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ms"] = lambda x, digits=1: "–" if x is None else f"{x:.{digits}f}"
    return env


def _assets() -> dict[str, Markup]:
    # Inlined so the page needs nothing beside it; read as text, never rendered as templates.
    return {"css": Markup((TEMPLATES / "page.css").read_text()),
            "js": Markup((TEMPLATES / "waterfall.js").read_text())}


def trace_page(traces: Sequence[TraceView | Trace], *, title: str, intro: str = "") -> str:
    """A page of one or more traces, each an interactive waterfall."""
    return _environment().get_template("trace.html.j2").render(
        title=title, intro=intro, traces=[trace_context(t) for t in traces], **_assets())


def write_trace_page(path: str | Path, traces: Sequence[TraceView | Trace], *, title: str, intro: str = "") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace_page(traces, title=title, intro=intro))
    return path


def _data_uri(path: Path) -> str | None:
    if not path.is_file():
        return None
    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _scenario_context(name: str, block: dict, out_dir: Path) -> dict:
    charts = []
    for key, png in (block.get("charts") or {}).items():
        svg = out_dir / Path(png).with_suffix(".svg")
        uri = _data_uri(svg) or _data_uri(out_dir / png)
        if uri:
            charts.append({"name": key, "uri": uri, "file": png})
    modes, step_rows = rp.step_table(block)
    representatives, failed = [], []
    for mode, result in block.get("modes", {}).items():
        if result.get("status") != "ok":
            failed.append({"mode": mode, "error": (result.get("error") or "").strip(), "log": result.get("log_file")})
            continue
        rep = result.get("representative")
        if not rep or not rep.get("file") or not (out_dir / rep["file"]).is_file():
            continue
        links = [("trace file", rep["file"])] + ([("static waterfall", rep["waterfall"])] if rep.get("waterfall") else [])
        view = TraceView(rp.load_trace(out_dir / rep["file"]),
                         title=f"{mode} — trace {rep['trace_id']}, e2e {rep.get('e2e_ms', 0):.1f} ms", links=links,
                         note="the request nearest this mode's median e2e", mode=mode)
        representatives.append({"mode": mode, **trace_context(view)})
    return {
        "name": name, "description": block.get("description", ""), "workload": block.get("workload", {}),
        "summary_columns": rp.SUMMARY_COLUMNS, "summary_rows": rp.summary_rows(block),
        "step_modes": modes, "step_rows": step_rows, "charts": charts,
        "representatives": representatives, "failed": failed,
    }


def report_page(report: dict, out_dir: str | Path) -> str:
    """The compare report as one page: its tables, its charts and each mode's representative trace."""
    out_dir = Path(out_dir)
    config = [(k, _value(v)) for k, v in (report.get("config") or {}).items()]
    host = report.get("host") or {}
    run = {"created": report.get("created", ""), "wall_s": report.get("wall_s"),
           "machine": ", ".join(str(x) for x in (f"{host['cpus']} CPUs" if host.get("cpus") else "", host.get("platform"))
                                if x)}
    return _environment().get_template("report.html.j2").render(
        run=run, config=config, baseline=report.get("baseline"),
        scenarios=[_scenario_context(n, b, out_dir) for n, b in report.get("scenarios", {}).items()],
        steps=st.STEPS, **_assets())


def write_report(report: dict, out_dir: str | Path) -> Path:
    """``report.html`` in the report folder (after report.json, charts and traces are written)."""
    path = Path(out_dir) / REPORT_PAGE
    path.write_text(report_page(report, out_dir))
    return path


def trace_views(traces: Iterable[Trace], links_for=None) -> list[TraceView]:
    """Plain traces as views titled by their root span; ``links_for(trace)`` adds links."""
    views = []
    for trace in traces:
        root = min(trace.roots, key=lambda s: s.start_us, default=None) if trace.spans else None
        title = f"{root.label} — trace {trace.trace_id}" if root else f"trace {trace.trace_id}"
        views.append(TraceView(trace, title=title, links=list(links_for(trace)) if links_for else []))
    return views
