"""A trace as named step durations: what each step of one request cost, in milliseconds.

| step      | from the trace                                                                      |
|-----------|-------------------------------------------------------------------------------------|
| decision  | the deciding component's span: epp.pick (ext_proc), frontend.route (sidecar),        |
|           | callout.pick (callout modes); none in direct                                         |
| roundtrip | Envoy's span of the call to the picker: the ext_proc gRPC stream, the Lua            |
|           | ``httpCall`` (``async callout egress``) or the module's ``dynmod callout``           |
| gateway   | Envoy ingress start -> first upstream attempt start: everything Envoy did before it  |
|           | forwarded the request (filters, picker call, route); in every mode, direct included  |
| encode    | first ``encoder.encode`` start -> last one's end (items run in parallel)             |
| queue     | sum of ``vllm.queue`` (P and D each queue in P/D)                                    |
| prefill   | sum of ``vllm.prefill``                                                              |
| kv        | sum of ``vllm.kv_transfer``                                                          |
| decode    | sum of ``vllm.decode``                                                               |
|           | (a real vLLM has no step spans: queue, prefill and decode are then the sums of its   |
|           | ``llm_request``'s ``gen_ai.latency.time_in_queue`` / ``_in_model_prefill`` /          |
|           | ``_in_model_decode``, which it measures inside the engine)                           |
| ttft      | ``first_token`` event on ``client.request`` minus its start (streaming requests only)|
| e2e       | ``client.request``                                                                   |

A step the trace does not show is absent from the result (not zero), so percentiles are
taken over the requests that had it.

``breakdown()`` splits one request's e2e into disjoint parts that add up to it, for
stacked bars: decision, picker call (roundtrip - decision), envoy (gateway - roundtrip),
(the picker call capped at gateway: an ext_proc stream may close just after the upstream starts)
encode, queue, prefill, kv, decode, other (the rest: network, sidecars, client).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from eppkit.observability import expected_spans as ex
from eppkit.observability.contract import Encoder, GenAi, Service, Stream, Vllm
from eppkit.observability.trace_model import Span, Trace


@dataclass(frozen=True)
class Step:
    name: str
    description: str


STEPS: tuple[Step, ...] = (
    Step("decision", "the picker's decision span (epp.pick / frontend.route / callout.pick)"),
    Step("roundtrip", "Envoy's span of the call to the picker (ext_proc gRPC stream or callout HTTP call)"),
    Step("gateway", "Envoy ingress start to upstream request start (all filters, picker call included)"),
    Step("encode", "encoder phase: first encoder.encode start to last end"),
    Step("queue", "sum of vllm.queue"),
    Step("prefill", "sum of vllm.prefill"),
    Step("kv", "sum of vllm.kv_transfer"),
    Step("decode", "sum of vllm.decode"),
    Step("ttft", "client's time to first token (first_token event on client.request; streaming only)"),
    Step("e2e", "client.request, end to end"),
)
STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)

# Disjoint parts of e2e, in the order they happen (for stacked bars).
BREAKDOWN: tuple[str, ...] = ("decision", "picker call", "envoy", "encode", "queue", "prefill", "kv", "decode", "other")

_VLLM_SUMS = {"queue": Vllm.QUEUE, "prefill": Vllm.PREFILL, "kv": Vllm.KV_TRANSFER, "decode": Vllm.DECODE}
# What a real vLLM reports of the same steps on its one span (seconds).
_VLLM_ATTRIBUTES = {"queue": GenAi.LATENCY_TIME_IN_QUEUE, "prefill": GenAi.LATENCY_TIME_IN_MODEL_PREFILL,
                    "decode": GenAi.LATENCY_TIME_IN_MODEL_DECODE}


def _ms(us: int | float) -> float:
    return us / 1000.0


def _sum_ms(spans: Iterable[Span]) -> float | None:
    spans = list(spans)
    return _ms(sum(s.duration_us for s in spans)) if spans else None


def step_durations(trace: Trace, mode: ex.ModeSpans | None) -> dict[str, float]:
    """The steps of one request's trace in ``mode`` (its registry entry, eppkit.modes.Mode; None: no picker
    steps), in ms; steps the trace does not show are left out."""
    out: dict[str, float | None] = {}
    roots = ex.ROOT.find(trace)
    root = roots[0] if len(roots) == 1 else None
    if root is not None:
        out["e2e"] = root.duration_ms
        first = next((ev for ev in root.events if ev.name == Stream.FIRST_TOKEN), None)
        if first is not None:
            out["ttft"] = _ms(first.time_us - root.start_us)
    # An EPP that is not the kit's (external-epp, gaie-epp) has Envoy's call to it, its round trip,
    # but no decision span in the request's trace.
    call, decision = ex.picker_call(mode), ex.decision(mode)
    if call is not None:
        out["roundtrip"] = _sum_ms(call.find(trace))
        if decision is not None:
            out["decision"] = _sum_ms(decision.find(trace))
    ingress = ex.INGRESS.find(trace)
    upstream = ex.UPSTREAM.find(trace)
    if ingress and upstream:
        start = min(s.start_us for s in ingress)
        out["gateway"] = max(0.0, _ms(min(s.start_us for s in upstream) - start))
    encodes = trace.find_all(Encoder.ENCODE, Service.ENCODER)
    if encodes:
        out["encode"] = _ms(max(s.end_us for s in encodes) - min(s.start_us for s in encodes))
    for step, span_name in _VLLM_SUMS.items():
        out[step] = _sum_ms(trace.find_all(span_name, Service.VLLM))
    requests = trace.find_all(Vllm.REQUEST, Service.VLLM)
    if requests and not any(s.service == Service.VLLM and s.name != Vllm.REQUEST for s in trace.spans):
        for step, attribute in _VLLM_ATTRIBUTES.items():  # a real vLLM: its own measures
            seconds = [s.attributes[attribute] for s in requests if isinstance(s.attributes.get(attribute), (int, float))]
            out[step] = sum(seconds) * 1000.0 if seconds else None
    return {k: v for k, v in out.items() if v is not None}


def breakdown(steps: dict[str, float]) -> dict[str, float]:
    """One request's e2e as disjoint parts (see module doc); parts never negative."""
    decision = steps.get("decision", 0.0)
    roundtrip = steps.get("roundtrip", 0.0)
    gateway = steps.get("gateway", 0.0)
    # The ext_proc stream can close a little after the upstream request started (the span
    # then outlasts ``gateway``); before-the-upstream parts are capped so they add up to it.
    call = min(roundtrip, gateway) if gateway else roundtrip
    parts = {
        "decision": decision,
        "picker call": max(0.0, call - decision),
        "envoy": max(0.0, gateway - max(call, decision)),
    }
    for name in ("encode", "queue", "prefill", "kv", "decode"):
        parts[name] = steps.get(name, 0.0)
    parts["other"] = max(0.0, steps.get("e2e", 0.0) - sum(parts.values()))
    return parts


# -- statistics ----------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), linear between closest ranks (numpy's default).

    p50 is the median exactly as ``statistics.median`` gives it.
    """
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p90, p99, mean, min, max of ``values`` (ms), rounded to 0.001."""
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "n": len(values),
        "p50": r(percentile(values, 50)),
        "p90": r(percentile(values, 90)),
        "p99": r(percentile(values, 99)),
        "mean": r(sum(values) / len(values)) if values else None,
        "min": r(min(values)) if values else None,
        "max": r(max(values)) if values else None,
    }
