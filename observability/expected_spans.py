"""Which spans a complete trace holds, per integration mode and flow: one table for tests and reports.

Checked against real traces (Envoy 1.40, every mode x aggregated / pd / epd):

    client:client.request
      envoy:ingress
        envoy:<the picker call>                 ext_proc, sidecar: "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"
          epp:epp.process > epp.pick, epp.inject    lua-callout: "async callout egress"
            frontend:frontend.route (sidecar)       dynmod-callout: "dynmod callout" (the module's own span)
          callout:callout.pick (callout modes)
        envoy:router <cluster> egress           "router pool egress" (direct), "router picked egress"
          vllm:llm_request > vllm.queue, vllm.prefill, vllm.decode         (aggregated)
          pd-sidecar:pd.request > pd.encode* > encoder:encoder.encode      (epd, one per media item)
                                > pd.prefill > vllm:llm_request > vllm.queue, vllm.prefill
                                > pd.decode  > vllm:llm_request > vllm.queue, vllm.kv_transfer, vllm.decode

``expected(mode, flow, media_items)`` gives the rules; ``missing(trace, rules)`` names what a
trace lacks. A rule asks for *at least* ``count`` spans: a P/D trace has two ``vllm.queue``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from eppkit.observability.trace_model import Span, Trace

MODES = ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout")
FLOWS = ("aggregated", "pd", "epd", "ttft", "multipart")


@dataclass(frozen=True)
class SpanRule:
    """``count`` or more spans of ``service`` named ``name`` (or, with ``prefix``, starting with it)."""

    service: str
    name: str
    prefix: bool = False
    count: int = 1

    def matches(self, span: Span) -> bool:
        if span.service != self.service:
            return False
        return span.name.startswith(self.name) if self.prefix else span.name == self.name

    def find(self, trace: Trace) -> list[Span]:
        return [s for s in trace.spans if self.matches(s)]

    @property
    def label(self) -> str:
        return f"{self.service}:{self.name}{'*' if self.prefix else ''}"


def _r(service: str, name: str, **kw) -> SpanRule:
    return SpanRule(service, name, **kw)


EXT_PROC_CALL = _r("envoy", "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress")

# Envoy's span of the call to the picker: the ext_proc gRPC stream or the callout HTTP call.
PICKER_CALL: dict[str, SpanRule] = {
    "ext_proc": EXT_PROC_CALL,
    "sidecar": EXT_PROC_CALL,
    "lua-callout": _r("envoy", "async callout egress"),
    "dynmod-callout": _r("envoy", "dynmod callout"),
}

# The span of the component that makes the decision. In sidecar the EPP asks the frontend,
# so the decision is the frontend's (epp.pick there also holds the HTTP call to it).
DECISION: dict[str, SpanRule] = {
    "ext_proc": _r("epp", "epp.pick"),
    "sidecar": _r("frontend", "frontend.route"),
    "lua-callout": _r("callout", "callout.pick"),
    "dynmod-callout": _r("callout", "callout.pick"),
}

ROOT = _r("client", "client.request")
INGRESS = _r("envoy", "ingress")
UPSTREAM = _r("envoy", "router ", prefix=True)  # "router <cluster> egress"

_COMMON = (ROOT, INGRESS, UPSTREAM)

_MODE_SPANS: dict[str, tuple[SpanRule, ...]] = {
    "direct": (),
    "ext_proc": (EXT_PROC_CALL, _r("epp", "epp.process"), _r("epp", "epp.pick"), _r("epp", "epp.inject")),
    "sidecar": (EXT_PROC_CALL, _r("epp", "epp.process"), _r("epp", "epp.pick"), _r("epp", "epp.inject"),
                _r("frontend", "frontend.route"), _r("frontend", "frontend.tokenize")),
    "lua-callout": (PICKER_CALL["lua-callout"], _r("callout", "callout.pick")),
    "dynmod-callout": (PICKER_CALL["dynmod-callout"], _r("callout", "callout.pick")),
}

_AGGREGATED = (_r("vllm", "llm_request"), _r("vllm", "vllm.queue"), _r("vllm", "vllm.prefill"),
               _r("vllm", "vllm.decode"))
_DISAGGREGATED = (_r("pd-sidecar", "pd.request"), _r("pd-sidecar", "pd.prefill"), _r("pd-sidecar", "pd.decode"),
                  _r("vllm", "llm_request", count=2), _r("vllm", "vllm.queue", count=2),
                  _r("vllm", "vllm.prefill"), _r("vllm", "vllm.kv_transfer"), _r("vllm", "vllm.decode"))


def expected(mode: str, flow: str, media_items: int = 0) -> tuple[SpanRule, ...]:
    """The spans a complete trace of one successful request holds in ``mode`` x ``flow``.

    ``media_items``: images etc. in the request (epd flow: one ``pd.encode`` and one
    ``encoder.encode`` each).
    """
    if mode not in _MODE_SPANS:
        raise ValueError(f"no expected-span table for mode {mode!r}; known: {', '.join(MODES)}")
    if flow == "aggregated":
        flow_spans = _AGGREGATED
    elif flow == "multipart":
        if mode != "ext_proc":
            raise ValueError("the multipart flow runs in the ext_proc mode only")
        flow_spans = _AGGREGATED + (_r("vllm", "vllm.await_metadata"),)
    elif flow in ("pd", "ttft"):
        flow_spans = _DISAGGREGATED
    elif flow == "epd":
        flow_spans = _DISAGGREGATED
        if media_items:
            flow_spans += (_r("pd-sidecar", "pd.encode", count=media_items),
                           _r("encoder", "encoder.encode", count=media_items))
    else:
        raise ValueError(f"no expected-span table for flow {flow!r}; known: {', '.join(FLOWS)}")
    return _COMMON + _MODE_SPANS[mode] + flow_spans


def missing(trace: Trace | None, rules: Iterable[SpanRule]) -> list[str]:
    """What ``trace`` lacks, e.g. ``["epp:epp.inject", "vllm:vllm.queue (1 of 2)"]``; [] when complete."""
    out = []
    for rule in rules:
        n = len(rule.find(trace)) if trace is not None else 0
        if n >= rule.count:
            continue
        out.append(rule.label if rule.count == 1 else f"{rule.label} ({n} of {rule.count})")
    return out
