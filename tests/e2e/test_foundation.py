"""One streaming request: client -> real Envoy (direct) -> mock vLLM, checked on the Jaeger trace."""

import pytest
from eppkit.observability.contract import Client, Envoy, Service, Stream, Vllm
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.topology import Topology, VllmSpec

pytestmark = pytest.mark.e2e

TTFT_MS = 300.0
ITL_MS = 10.0
MAX_TOKENS = 12
# Prefill is a timer in the mock; on a loaded 2-core machine scheduling adds a few ms.
PREFILL_TOLERANCE_MS = 25.0


@pytest.fixture
def direct_bed(eppkit_testbed_factory):
    return eppkit_testbed_factory(Topology(mode="direct", vllm=[VllmSpec("vllm-0")],
                                    latency=MockLatency(time_to_first_token=TTFT_MS, inter_token_latency=ITL_MS)))


@pytest.mark.eppkit_alone("prefill within 25 ms of its 300 ms")
@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_streaming_request_through_envoy_is_traced_end_to_end(direct_bed):
    client = direct_bed.client()
    result = client.chat({"model": "mock-llm", "stream": True, "max_tokens": MAX_TOKENS,
                          "messages": [{"role": "user", "content": "Say something about Envoy."}]})
    client.flush()

    assert result.status == 200, result.body
    assert result.headers.get("x-inference-pod") == "vllm-0"
    assert len(result.tokens) == MAX_TOKENS, f"client got {len(result.tokens)} tokens: {result.tokens}"
    assert result.events[-1] == {"done": True}, "stream did not end with data: [DONE]"

    trace = direct_bed.jaeger.wait_for_trace(
        result.trace_id,
        [Client.REQUEST, Envoy.INGRESS, Vllm.REQUEST,
         Vllm.PREFILL, Vllm.DECODE],
    )
    check = TraceCheck(trace)
    check.follows_contract()
    root = check.one(Client.REQUEST, Service.CLIENT)
    ingress = check.one(service=Service.ENVOY, name=Envoy.INGRESS)
    llm = check.one(Vllm.REQUEST, Service.VLLM)
    prefill, decode = check.one(Vllm.PREFILL), check.one(Vllm.DECODE)

    # parentage: client -> Envoy -> vLLM, one trace, one root
    check.single_root(root)
    check.descendant_of(ingress, root)
    check.descendant_of(llm, ingress)
    check.child_of(prefill, llm)
    check.child_of(decode, llm)
    # order: prefill ends before the first token and before decode starts
    first_token = llm.event(Stream.FIRST_TOKEN)
    check.event_before(prefill.end_us, "vllm.prefill end", decode)
    assert prefill.end_us <= first_token.time_us, "first_token event came before prefill ended"
    assert first_token.time_us <= decode.start_us + 1000, "first token should be out before decode starts"
    # timing: prefill lasts the configured TTFT
    check.duration(prefill, TTFT_MS, PREFILL_TOLERANCE_MS)
    check.within(llm, ingress, slack_ms=1.0)
    # decode produced the rest of the tokens at the configured pace (one token per ITL after the first)
    assert decode.duration_ms >= (MAX_TOKENS - 1) * ITL_MS * 0.8
