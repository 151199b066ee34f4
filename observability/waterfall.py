"""A text waterfall of a trace: one line per span, indented by depth, bars on a shared time axis."""

from __future__ import annotations

from eppkit.observability.contract import Callout, Envoy, Epp, Frontend, Media, Pd, Vllm
from eppkit.observability.trace_model import Span, Trace

_KEY_ATTRS = (
    Epp.ENDPOINT,
    Epp.SCORER,
    Frontend.WORKER_ID,
    Callout.ENDPOINT,
    Vllm.ROLE,
    Vllm.INSTANCE,
    Media.TYPE,
    Pd.TRUE_TTFT_MS,
    Envoy.HTTP_STATUS_CODE,
    Envoy.UPSTREAM_ADDRESS,
)


def render(trace: Trace, width: int = 60) -> str:
    if not trace.spans:
        return f"trace {trace.trace_id}: (no spans)"
    t0, t1 = trace.start_us, trace.end_us
    total = max(t1 - t0, 1)
    lines = [f"trace {trace.trace_id}  total {total / 1000:.1f} ms  spans {len(trace.spans)}"]
    label_w = min(52, max(len(_label(s, d)) for s, d in trace.walk()) + 1)
    for span, depth in trace.walk():
        a = int((span.start_us - t0) / total * width)
        b = max(a + 1, int((span.end_us - t0) / total * width))
        bar = " " * a + "█" * (b - a) + " " * (width - b)
        for ev in span.events:
            pos = min(width - 1, int((ev.time_us - t0) / total * width))
            bar = bar[:pos] + "◆" + bar[pos + 1 :]
        extra = _attrs(span)
        lines.append(
            f"{_label(span, depth)[:label_w]:<{label_w}}|{bar}| "
            f"+{(span.start_us - t0) / 1000:8.1f} {span.duration_ms:8.1f} ms{' ERR' if span.error else ''}{extra}"
        )
    lines.append("◆ = span event (e.g. first_token)")
    return "\n".join(lines)


# Display-only abbreviations of long Envoy span names (the trace itself keeps the full name).
_SHORT = {Envoy.EXT_PROC_CALL: "async ext_proc.Process egress"}


def _label(span: Span, depth: int) -> str:
    label = span.label
    for long, short in _SHORT.items():
        label = label.replace(long, short)
    return "  " * depth + label


def _attrs(span: Span) -> str:
    shown = [f"{k}={span.attributes[k]}" for k in _KEY_ATTRS if k in span.attributes]
    return ("  " + " ".join(shown)) if shown else ""
