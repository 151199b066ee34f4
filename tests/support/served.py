"""For tests that run against any backend (``pytest --eppkit-backend mock|llm-d-inference-sim|vllm``): which spans
the backend adds to a trace (who served a response: the testbed's ``served_pod(headers)``)."""

from __future__ import annotations

from eppkit.observability import expected_spans

from eppkit.backends import SIM


def backend_spans(bed) -> tuple[expected_spans.SpanRule, ...]:
    """The spans the testbed's backend puts under Envoy's upstream span for one request it serves alone:
    the mock's ``llm_request`` and its steps, a real vLLM's ``llm_request``, nothing from llm-d-inference-sim."""
    return expected_spans.backend_one(bed.topology.backend.emits)


def reports_cache_hits(bed) -> bool:
    """The backend says how many prompt tokens its prefix cache held (``usage.prompt_tokens_details.cached_tokens``):
    the mock, and a real vLLM (the preset runs it with --enable-prompt-tokens-details). llm-d-inference-sim answers
    0 always: its KV cache (--enable-kvcache) needs a pod IP, a real tokenizer and a KV-events endpoint."""
    return bed.topology.backend.kind != SIM


def serve_alternating(bed, body, n: int = 4) -> tuple[dict[str, str], list[tuple]]:
    """``n`` requests, unstreamed and streamed in turn, each served (200): the backends' names by address, and each
    result with the pod that served it (its spans flushed)."""
    names = {ep.address: ep.name for ep in bed.backends}
    client = bed.client()
    served = []
    for i in range(n):
        result = client.chat(body(stream=i % 2 == 1))
        assert result.status == 200, result.body
        served.append((result, bed.served_pod(result.headers)))
    client.flush()
    return names, served
