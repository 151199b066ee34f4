"""Which spans a complete trace holds, per integration mode and flow: one table for tests, reports and `eppkit run`.

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

``expected(mode, behind)`` gives the rules (the mode's registry entry and what its flow adds, both handed
in: eppkit.modes, eppkit.flows); ``missing(trace, rules)`` names what a
trace lacks (the one completeness check: Jaeger waits, compare and `eppkit run` use it). A rule
asks for *at least* ``count`` spans: a P/D trace has two ``vllm.queue``. Span names and the
services that emit them come from the trace contract (observability/contract.py).

``backend_spans`` says what the inference servers emit (:data:`BACKEND_SPANS`): ``full`` (the kit's
mock: ``llm_request`` and its ``vllm.*`` children), ``llm_request`` (a vLLM with tracing on: its one
server span per request, service name ``vllm``) or ``none`` (llm-d-inference-sim, or a server that
does not trace). Every span of the kit's own parts (client, Envoy, pickers, pd-sidecar, encoders)
is expected whatever the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

from eppkit.observability import contract
from eppkit.observability.contract import Client, Envoy, Pd, Vllm

if TYPE_CHECKING:  # only names here: importing the trace model loads OTel's protos, which `eppkit
    # bootstrap` may first have to repair (the CLI imports this module through the topology)
    from eppkit.observability.trace_model import Span, Trace

# What a backend puts into a trace: nothing, vLLM's one server span per request, or the mock's every step.
NONE, LLM_REQUEST, FULL = "none", "llm_request", "full"
BACKEND_SPANS = (NONE, LLM_REQUEST, FULL)


@dataclass(frozen=True)
class SpanRule:
    """``count`` or more spans of ``service`` named ``name`` (or, with ``prefix``, starting with it)."""

    service: str
    name: str
    prefix: bool = False
    count: int = 1

    @classmethod
    def of(cls, spec: "SpanRule | tuple[str, str] | str", **kw) -> "SpanRule":
        """A rule from a rule, a ``(service, name)`` pair, or a contract span name (its service looked up)."""
        if isinstance(spec, SpanRule):
            return spec
        if isinstance(spec, str):
            return cls(contract.service_of(spec), spec, **kw)
        service, name = spec
        return cls(service, name, **kw)

    def matches(self, span: Span) -> bool:
        if span.service != self.service:
            return False
        return span.name.startswith(self.name) if self.prefix else span.name == self.name

    def find(self, trace: Trace) -> list[Span]:
        return [s for s in trace.spans if self.matches(s)]

    @property
    def label(self) -> str:
        return f"{self.service}:{self.name}{'*' if self.prefix else ''}"


def rules(specs: Iterable["SpanRule | tuple[str, str] | str"]) -> tuple[SpanRule, ...]:
    return tuple(SpanRule.of(s) for s in specs)


_r = SpanRule.of

ROOT = _r(Client.REQUEST)
INGRESS = _r(Envoy.INGRESS)
UPSTREAM = SpanRule(contract.Service.ENVOY, Envoy.ROUTER_PREFIX, prefix=True)  # "router <cluster> egress"
EXT_PROC_CALL = _r(Envoy.EXT_PROC_CALL)

_COMMON = (ROOT, INGRESS, UPSTREAM)


class ModeSpans(Protocol):
    """What this module reads of a mode (eppkit.modes.Mode): its picker call, its decision, its spans."""

    picker_call: str | None
    decision: tuple[str, str] | None
    spans: tuple[tuple[str, str], ...]


def picker_call(mode: ModeSpans | None) -> SpanRule | None:
    """Envoy's span of the call to the picker (the ext_proc stream, the callout); None in ``direct``."""
    return _r(mode.picker_call) if mode is not None and mode.picker_call else None


def decision(mode: ModeSpans | None) -> SpanRule | None:
    """The span of the component that makes the decision (in sidecar the frontend's: the EPP's
    epp.pick there also holds the HTTP call to it); None when nobody decides or it is not traced."""
    return _r(mode.decision) if mode is not None and mode.decision else None


# The backend's spans, per what it emits (BACKEND_SPANS): one request (aggregated) and a P/D pair.
_BACKEND_ONE = {NONE: (), LLM_REQUEST: (_r(Vllm.REQUEST),), FULL: rules((Vllm.REQUEST, Vllm.QUEUE, Vllm.PREFILL, Vllm.DECODE))}
_BACKEND_PD = {NONE: (), LLM_REQUEST: (_r(Vllm.REQUEST, count=2),),
               FULL: (_r(Vllm.REQUEST, count=2), _r(Vllm.QUEUE, count=2)) + rules((Vllm.PREFILL, Vllm.KV_TRANSFER,
                                                                                  Vllm.DECODE))}
# The pd-sidecar in front of each decoder (pd, epd, ttft).
PD_SIDECAR = rules((Pd.REQUEST, Pd.PREFILL, Pd.DECODE))


def backend_one(emits: str) -> tuple[SpanRule, ...]:
    """What a backend that ``emits`` (BACKEND_SPANS) puts into the trace of a request it serves alone."""
    return _BACKEND_ONE[emits]


def backend_pd(emits: str) -> tuple[SpanRule, ...]:
    """The same for a prefill + decode pair."""
    return _BACKEND_PD[emits]


def expected(mode: ModeSpans, behind: Iterable[SpanRule], extra: Iterable[SpanRule | tuple[str, str] | str] = ()
             ) -> tuple[SpanRule, ...]:
    """The spans a complete trace of one successful request holds in ``mode``: the client's and Envoy's,
    the mode's, ``behind`` (what the flow adds behind Envoy's upstream span for this request and backend:
    eppkit.flows.Flow.spans) and ``extra`` (more spans every request has, e.g. an EPP of your own that
    names its decision span)."""
    return _COMMON + rules(mode.spans) + tuple(behind) + rules(extra)


def check_backend_spans(emits: str) -> str:
    """``emits`` if it is one of :data:`BACKEND_SPANS`, else ValueError naming them."""
    if emits not in BACKEND_SPANS:
        raise ValueError(f"backend_spans {emits!r}: choose one of {', '.join(BACKEND_SPANS)}")
    return emits


def missing(trace: Trace | None, wanted: Iterable[SpanRule | tuple[str, str] | str], *, min_spans: int = 0) -> list[str]:
    """What ``trace`` lacks, e.g. ``["epp:epp.inject", "vllm:vllm.queue (1 of 2)"]``; [] when complete.

    ``min_spans``: the trace must also hold at least that many spans in all.
    """
    out = []
    for rule in map(SpanRule.of, wanted):
        n = len(rule.find(trace)) if trace is not None else 0
        if n >= rule.count:
            continue
        out.append(rule.label if rule.count == 1 else f"{rule.label} ({n} of {rule.count})")
    have = len(trace.spans) if trace is not None else 0
    if have < min_spans:
        out.append(f"{min_spans - have} more span(s) (have {have})")
    if trace is None and not out:
        out.append("any span")
    return out
