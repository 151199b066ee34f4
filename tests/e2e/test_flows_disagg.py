"""E/P/D disaggregation and first-token streaming, proven step by step from Jaeger traces.

All run through the real Envoy (direct mode: the pd-sidecar picks P and E itself; the
picker modes pass them as x-prefiller-host-port / x-encoder-hosts-ports, tested with the modes).
"""

import re

import pytest
from eppkit.observability.contract import Client, Encoder, GenAi, Pd, Service, Stream, Vllm
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.topology import Topology

pytestmark = pytest.mark.e2e

TTFT_MS = 150.0
ITL_MS = 5.0
KV_MS = 40.0
LATENCY = MockLatency(time_to_first_token=TTFT_MS, inter_token_latency=ITL_MS)
WITH_KV = MockLatency(time_to_first_token=TTFT_MS, inter_token_latency=ITL_MS, kv_cache_transfer_latency=KV_MS)
ENCODE_MS = 60.0
TOL_MS = 25.0
IMAGE = "data:image/png;base64,{}"

DISAGG_SPANS = [Client.REQUEST, Pd.REQUEST, Pd.PREFILL,
                Pd.DECODE, Vllm.PREFILL, Vllm.KV_TRANSFER, Vllm.DECODE]


def _chat(content, *, stream=True, max_tokens=8, seed=None):
    body = {"model": "mock-llm", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}]}
    if seed is not None:
        body["seed"] = seed
    return body


def _with_images(n: int, text="Describe these pictures."):
    return [{"type": "text", "text": text}] + [
        {"type": "image_url", "image_url": {"url": IMAGE.format(f"aW1n{i}" * 20)}} for i in range(n)]


def _instance_span(check, name, instance):
    """The ``name`` step of the mock ``instance`` (the instance is named on its llm_request)."""
    if name == Vllm.REQUEST:
        return check.one(name, Service.VLLM, **{Vllm.INSTANCE: instance})
    llm = check.one(Vllm.REQUEST, Service.VLLM, **{Vllm.INSTANCE: instance})
    steps = [c for c in llm.children if c.name == name]
    if len(steps) != 1:
        check.fail(f"expected one {name} under {instance}'s llm_request, found {len(steps)}")
    return steps[0]


@pytest.mark.eppkit_alone("prefill and KV transfer within 25 ms")
@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_pd_prefill_ends_before_decode_pulls_kv_and_decode_does_not_prefill(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(flow="pd", latency=WITH_KV))
    client = bed.client()
    result = client.chat(_chat("Tell me about KV transfer."))
    client.flush()
    assert result.status == 200, result.body
    assert len(result.tokens) == 8
    assert result.headers.get("x-inference-pod") == "vllm-d0"

    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, DISAGG_SPANS))
    p_prefill = _instance_span(check, Vllm.PREFILL, "vllm-p0")
    d_kv = _instance_span(check, Vllm.KV_TRANSFER, "vllm-d0")
    d_decode = _instance_span(check, Vllm.DECODE, "vllm-d0")
    check.before(p_prefill, d_kv)
    check.before(d_kv, d_decode)
    d_llm = _instance_span(check, Vllm.REQUEST, "vllm-d0")
    assert [c for c in d_llm.children if c.name == Vllm.PREFILL] == [], "decode instance must not prefill"
    check.duration(p_prefill, TTFT_MS, TOL_MS)
    check.duration(d_kv, KV_MS, TOL_MS)
    check.descendant_of(p_prefill, check.one(Pd.PREFILL))
    check.descendant_of(d_decode, check.one(Pd.DECODE))
    check.in_order([check.one(Pd.PREFILL), check.one(Pd.DECODE)])
    # P was asked for one token only, and it handed kv_transfer_params on
    p_llm = _instance_span(check, Vllm.REQUEST, "vllm-p0")
    assert p_llm.attributes.get(GenAi.USAGE_COMPLETION_TOKENS) == 1


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_epd_encoders_run_first_in_parallel_round_robin_and_prefill_hits_their_cache(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(flow="epd", encoders=2, latency=LATENCY, encode_latency=ENCODE_MS))
    client = bed.client()
    result = client.chat(_chat(_with_images(3)))
    client.flush()
    assert result.status == 200, result.body

    trace = bed.jaeger.wait_for_trace(result.trace_id, DISAGG_SPANS + [Encoder.ENCODE], min_spans=19)
    check = TraceCheck(trace)
    encodes = check.all(Encoder.ENCODE, Service.ENCODER)
    assert len(encodes) == 3, f"one encoder.encode per image, got {len(encodes)}"
    p_prefill = _instance_span(check, Vllm.PREFILL, "vllm-p0")
    for span in encodes:
        check.before(span, p_prefill)
    # round robin over 2 encoders: both used
    assert {s.attributes.get(Encoder.INSTANCE) for s in encodes} == {"encoder-0", "encoder-1"}
    # run concurrently: the three pd.encode spans overlap in time
    pd_encodes = check.all(Pd.ENCODE, Service.PD_SIDECAR)
    assert max(s.start_us for s in pd_encodes) < min(s.end_us for s in pd_encodes), "encoder requests did not overlap"
    # child request ids <parent>:<index>:<short>
    ids = sorted(s.attributes.get(GenAi.REQUEST_ID, "") for s in encodes)
    assert all(re.fullmatch(r".+:[0-2]:[0-9a-f]{8}", i) for i in ids), ids
    assert p_prefill.attributes.get(Vllm.EC_CACHE_HITS) == 3
    assert p_prefill.attributes.get(Vllm.EC_CACHE_MISSES) == 0


def test_epd_text_only_request_skips_encoders(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(flow="epd", encoders=2, latency=LATENCY))
    client = bed.client()
    result = client.chat(_chat("No pictures here."))
    client.flush()
    assert result.status == 200
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, DISAGG_SPANS))
    check.absent(Encoder.ENCODE)
    check.absent(Pd.ENCODE)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_e_plus_pd_when_prefill_is_disabled(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(flow="epd", prefill=0, encoders=1, latency=LATENCY, encode_latency=ENCODE_MS))
    client = bed.client()
    result = client.chat(_chat(_with_images(2), stream=False))
    client.flush()
    assert result.status == 200, result.body
    check = TraceCheck(bed.jaeger.wait_for_trace(
        result.trace_id, [Encoder.ENCODE, Vllm.PREFILL, Pd.DECODE]))
    check.absent(Pd.PREFILL)
    pd_prefill = _instance_span(check, Vllm.PREFILL, "vllm-d0")  # the PD instance prefills itself
    for span in check.all(Encoder.ENCODE):
        check.before(span, pd_prefill)
    assert pd_prefill.attributes.get(Vllm.EC_CACHE_HITS) == 2


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers")
def test_epd_encoder_failure_is_a_502_naming_the_item(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(flow="epd", encoders=1, latency=LATENCY))
    client = bed.client()
    result = client.chat(_chat(_with_images(1), stream=False), headers={"x-mock-encoder-failure": "500"})
    assert result.status == 502, result.body
    message = result.body["error"]["message"]
    assert "media item 0" in message and "image_url" in message, message


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_ttft_streams_prefills_first_token_before_decode_and_matches_the_unstreamed_text(eppkit_testbed_factory):
    # Decode's 10 tokens at 20 ms: the client's view below allows its read of the first token to lag the
    # sidecar's write by up to that long (~180 ms) on a loaded machine.
    latency = MockLatency(time_to_first_token=TTFT_MS, inter_token_latency=20.0, kv_cache_transfer_latency=KV_MS)
    bed = eppkit_testbed_factory(Topology(flow="ttft", latency=latency))
    client = bed.client()
    streamed = client.chat(_chat("Stream me the first token early.", seed=42, max_tokens=10))
    whole = client.chat(_chat("Stream me the first token early.", seed=42, max_tokens=10, stream=False))
    client.flush()
    assert streamed.status == 200 and whole.status == 200
    assert streamed.text == whole.text, "first-token streaming changed the text"
    assert len(streamed.tokens) == 10, "decode's duplicate first token was not stripped (or a token was lost)"
    roles = [i for i, e in enumerate(streamed.events) if any("role" in (c.get("delta") or {}) for c in e.get("choices", []))]
    assert roles == [0], "one role-only chunk opens the stream (vLLM's order); decode's own is not forwarded"

    check = TraceCheck(bed.jaeger.wait_for_trace(streamed.trace_id, DISAGG_SPANS))
    d_decode = _instance_span(check, Vllm.DECODE, "vllm-d0")
    d_kv = _instance_span(check, Vllm.KV_TRANSFER, "vllm-d0")
    # The flow's promise, judged exactly: the sidecar wrote prefill's token to the client (its own event)
    # before it asked decode, so before decode pulled the KV cache. Both follow from the sidecar's order of
    # work, whatever the machine's load.
    sent = check.one(Pd.REQUEST).event(Pd.FIRST_TOKEN_FROM_PREFILL)
    check.event_before(sent.time_us, "the sidecar's write of prefill's token", check.one(Pd.DECODE))
    check.event_before(sent.time_us, "the sidecar's write of prefill's token", d_kv)
    # The client's view, with a tolerance: it read that token before decode produced its last one, so the
    # token was streamed ahead of decode, not held back and sent with decode's stream. How soon the client
    # reads a byte depends on the machine (14.5 ms after decode's start once, at load 14 on 2 cores).
    client_first_token = check.one(Client.REQUEST).event(Stream.FIRST_TOKEN)
    if client_first_token.time_us >= d_decode.end_us:
        check.fail(f"expected the client's first token before {d_decode.label} ends (streamed ahead of decode); "
                   f"it came {(client_first_token.time_us - d_decode.end_us) / 1000:.2f} ms after")
    assert Pd.TRUE_TTFT_MS in check.one(Pd.REQUEST).attributes


# Alone: it compares two flows' TTFT medians of ~190 ms each; beside other tests at load 12-17 the gain once came
# out at 10 ms instead of its ~40 (it held in every earlier run beside other tests, but not in that one).
@pytest.mark.eppkit_alone("the TTFT gain within 20 % of the 40 ms KV transfer")
def test_ttft_gain_against_the_same_flow_without_first_token_streaming(eppkit_testbed_factory, record_property):
    common = dict(latency=WITH_KV)
    ttft = {}
    for flow in ("pd", "ttft"):
        bed = eppkit_testbed_factory(Topology(flow=flow, **common))
        client = bed.client()
        samples = []
        for i in range(3):
            result = client.chat(_chat(f"measure {i}", seed=i))
            client.flush()
            trace = bed.jaeger.wait_for_trace(result.trace_id, DISAGG_SPANS)
            samples.append(trace.one(Pd.REQUEST).attributes[Pd.TRUE_TTFT_MS])
        ttft[flow] = sorted(samples)[1]
        bed.stop()
    gain = ttft["pd"] - ttft["ttft"]
    record_property("ttft_ms_pd", ttft["pd"])
    record_property("ttft_ms_ttft", ttft["ttft"])
    print(f"\nTTFT from traces (median of 3): pd {ttft['pd']:.1f} ms, ttft {ttft['ttft']:.1f} ms, gain {gain:.1f} ms")
    # Streaming prefill's token saves at least the KV transfer (decode's first token comes after it).
    assert gain >= KV_MS * 0.8, ttft
