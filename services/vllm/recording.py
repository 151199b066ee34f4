"""What one request leaves behind: its span's attributes (vLLM's names) and the metrics it counts."""

from __future__ import annotations

from typing import Any

from eppkit.observability.contract import Error, GenAi, Http, Vllm
from eppkit.services.openai_server import api, handshake
from eppkit.services.openai_server.metrics import VllmMetrics
from eppkit.services.vllm.reply import Flow
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode


def request_attributes(span: trace.Span, req: api.GenRequest, max_model_len: int) -> None:
    """The request's attributes on its span, as vLLM sets them."""
    b = req.body
    attrs: dict[str, Any] = {
        GenAi.RESPONSE_MODEL: req.model,
        GenAi.USAGE_PROMPT_TOKENS: req.prompt_tokens,
        GenAi.REQUEST_N: 1,
        Vllm.STREAM: req.stream,
        Vllm.API: req.kind,
        # as vLLM: what the request may generate (the context's rest when it names no max_tokens)
        GenAi.REQUEST_MAX_TOKENS: req.max_tokens or max(0, max_model_len - req.prompt_tokens),
    }
    # as vLLM: the sampling parameters in effect (1.0 when not given), each only when not zero
    for key, attribute in (("temperature", GenAi.REQUEST_TEMPERATURE), ("top_p", GenAi.REQUEST_TOP_P)):
        value = b.get(key)
        value = 1.0 if value is None else float(value)
        if value:
            attrs[attribute] = value
    if req.media:
        attrs[Vllm.MM_ITEMS] = len(req.media)
    params = req.kv_transfer_params
    if handshake.wants_remote_decode(params):
        attrs[Vllm.KV_TRANSFER_PARAMS] = "do_remote_decode"
    elif handshake.has_remote_prefill(params):
        attrs[Vllm.KV_TRANSFER_PARAMS] = "do_remote_prefill"
    span.set_attributes(attrs)

def finish_attributes(span, req, n_out, finish_reason, queue, ttft, e2e, prefill, decode) -> None:
    span.set_attributes(
        {
            GenAi.USAGE_COMPLETION_TOKENS: n_out,
            GenAi.USAGE_NUM_SEQUENCES: 1,
            GenAi.LATENCY_TIME_IN_QUEUE: queue,
            GenAi.LATENCY_TIME_TO_FIRST_TOKEN: ttft,
            GenAi.LATENCY_E2E: e2e,
            GenAi.LATENCY_TIME_IN_MODEL_PREFILL: prefill,
            GenAi.LATENCY_TIME_IN_MODEL_DECODE: decode,
            GenAi.LATENCY_TIME_IN_MODEL_INFERENCE: prefill + decode,
            GenAi.RESPONSE_FINISH_REASONS: [finish_reason],
        }
    )

def count_tokens(m: VllmMetrics, max_model_len: int, req: api.GenRequest, n_out: int, cached: int, pulled: int,
                 inference_s: float) -> None:
    """vLLM's per-request token histograms and where the prompt's KV came from: computed here, this
    instance's prefix cache, or pulled from a prefiller (vLLM's p2p KV transfer)."""
    computed = max(0, req.prompt_tokens - cached - pulled)
    m.request_prompt_tokens.observe(req.prompt_tokens)
    m.request_generation_tokens.observe(n_out)
    limit = req.max_tokens or max(0, max_model_len - req.prompt_tokens)
    m.request_max_num_generation_tokens.observe(limit)
    m.request_params_max_tokens.observe(limit)
    m.request_params_n.observe(1)
    m.request_num_preemptions.observe(0)
    m.request_prefill_kv_computed_tokens.observe(computed)
    m.inference_time.observe(inference_s)
    m.prompt_tokens_by_source(source="local_compute").inc(computed)
    m.prompt_tokens_by_source(source="local_cache_hit").inc(cached)
    m.prompt_tokens_by_source(source="external_kv_transfer").inc(pulled)
    m.prompt_tokens_cached.inc(cached + pulled)
    m.prompt_tokens_cached_by_source(source="device").inc(cached)
    m.prompt_tokens_cached_by_source(source="p2p").inc(pulled)

def record_error(metrics: VllmMetrics, flow: Flow, status: int, message: str) -> None:
    metrics.request_errors(status=str(status)).inc()
    flow.span.set_status(Status(StatusCode.ERROR, message))
    flow.span.set_attribute(Error.TYPE, str(status))
    flow.span.set_attribute(Http.RESPONSE_STATUS_CODE, status)

def record_cancel(metrics: VllmMetrics, flow: Flow) -> None:
    metrics.client_cancellations.inc()
    metrics.request_success(finished_reason="abort").inc()
    flow.span.add_event(Vllm.CLIENT_CANCELLED)
    flow.span.set_attribute(Vllm.CANCELLED, True)
    flow.span.set_attribute(GenAi.RESPONSE_FINISH_REASONS, ["abort"])
    flow.span.set_status(Status(StatusCode.ERROR, "client disconnected"))
