"""Traces as self-contained HTML pages: one file, no network, no server.

A page opens from a CI artifact or a run folder as it is. Jinja2 renders it from the templates
beside this module (``templates/``); the stylesheet and the small script are inlined, charts are
embedded as data URIs, and each trace is an interactive waterfall drawn as plain SVG bars:

- one row per span in tree order, on a shared time axis, coloured by service; diamonds mark
  span events (``first_token`` ...); a failed span has a red outline;
- the picker's decision span and Envoy's call to the picker (those of the mode the page is given)
  and Envoy's upstream request are highlighted (:mod:`eppkit.observability.expected_spans`);
- hovering a row names it, clicking it opens its details: attributes, events, resource,
  status; ▾ folds a span's children away;
- ``#span=<span id>`` in the URL opens that span (a link into a CI artifact).

Everything works on the trace model, so the page does not care how a trace was read.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import jinja2
from eppkit.observability import expected_spans as ex
from eppkit.observability import waterfall
from eppkit.observability.contract import Service
from eppkit.observability.trace_model import Span, Trace
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"
# Every service's colour in every chart and page of the kit (the compare report's charts too).
SERVICE_COLORS = {Service.CLIENT: "#7f7f7f", Service.ENVOY: "#ff7f0e", Service.EPP: "#d62728",
                  Service.FRONTEND: "#e377c2", Service.CALLOUT: "#2ca02c", Service.PD_SIDECAR: "#9467bd",
                  Service.VLLM: "#1f77b4", Service.ENCODER: "#8c564b"}
_FALLBACK_COLORS = ("#17becf", "#bcbd22", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2")
_KIND_NAMES = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass
class TraceView:
    """One trace on a page, with a heading and links (label, href) shown above its waterfall."""

    trace: Trace
    title: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""
    # The integration mode (its registry entry, eppkit.modes.Mode): its picker call and decision are
    # highlighted. None: only Envoy's upstream request is.
    mode: ex.ModeSpans | None = None


# -- one trace as rows ---------------------------------------------------------------------------

def service_color(service: str) -> str:
    """The service's colour in every chart and page of the kit; unknown services get a stable one."""
    if service in SERVICE_COLORS:
        return SERVICE_COLORS[service]
    return _FALLBACK_COLORS[int(hashlib.sha1(service.encode()).hexdigest(), 16) % len(_FALLBACK_COLORS)]


def _roles(mode: ex.ModeSpans | None) -> tuple[tuple[str, str, tuple], ...]:
    """(role, its label, the rules that find its spans) in the order a request meets them."""
    call, decision = ex.picker_call(mode), ex.decision(mode)
    return (("picker-call", "picker call", (call,) if call else ()),
            ("decision", "decision", (decision,) if decision else ()),
            ("upstream", "upstream", (ex.UPSTREAM,)))


def _role(span: Span, roles) -> tuple[str, str]:
    for role, label, rules in roles:
        if any(rule.matches(span) for rule in rules):
            return role, label
    return "", ""


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


def waterfall_rows(trace: Trace, mode: ex.ModeSpans | None = None) -> list[dict]:
    """What the template draws for each span: position and size in percent, details, role."""
    roles = _roles(mode)
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

def environment(*more: Path) -> jinja2.Environment:
    """The pages' template environment: this module's templates, and those of ``more`` folders (a page of
    its own, such as the compare report's, extends base.html.j2 and draws waterfalls with these)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in (*more, TEMPLATES)]), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ms"] = lambda x, digits=1: "–" if x is None else f"{x:.{digits}f}"
    return env


def assets() -> dict[str, Markup]:
    # Inlined so the page needs nothing beside it; read as text, never rendered as templates.
    return {"css": Markup((TEMPLATES / "page.css").read_text()),
            "js": Markup((TEMPLATES / "waterfall.js").read_text())}


def trace_page(traces: Sequence[TraceView | Trace], *, title: str, intro: str = "") -> str:
    """A page of one or more traces, each an interactive waterfall."""
    return environment().get_template("trace.html.j2").render(
        title=title, intro=intro, traces=[trace_context(t) for t in traces], **assets())


def write_trace_page(path: str | Path, traces: Sequence[TraceView | Trace], *, title: str, intro: str = "") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace_page(traces, title=title, intro=intro))
    return path


def trace_views(traces: Iterable[Trace], links_for=None, mode: ex.ModeSpans | None = None) -> list[TraceView]:
    """Plain traces as views titled by their root span; ``links_for(trace)`` adds links; ``mode``: theirs."""
    views = []
    for trace in traces:
        root = min(trace.roots, key=lambda s: s.start_us, default=None) if trace.spans else None
        title = f"{root.label} — trace {trace.trace_id}" if root else f"trace {trace.trace_id}"
        views.append(TraceView(trace, title=title, links=list(links_for(trace)) if links_for else [], mode=mode))
    return views
