"""Disaggregated flows in every picker mode: the picker chooses decoder, prefiller and encoders.

As in llm-d, the picker (the EPP in ext_proc and sidecar, the callout service in lua-callout
and dynmod-callout) names the decoder's pd-sidecar as the destination and passes the
prefiller in ``x-prefiller-host-port`` and the encoders in ``x-encoder-hosts-ports``; Lua and
the Go module copy those from the callout's answer. The sidecar uses them, and falls back to
its own round robin only when they are missing.

The evidence, per mode, from the trace: the decision span names a prefiller, and the
prefill request (``llm_request`` with ``vllm.role=prefill``) was served by that instance.
Two prefillers run, and the first request forces the *second* one: the sidecar's fallback
round robin (never advanced while the header is present) would have taken the first, so a
match proves the header was used. A second, unforced request shows the picker's own choice
arriving the same way.
"""

import pytest
from eppkit.observability.contract import Callout, Encoder, Epp, Pd, Service, Vllm
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.topology import Topology

pytestmark = pytest.mark.e2e

PICKER_MODES = ("ext_proc", "sidecar", "lua-callout", "dynmod-callout")
IMAGE = "data:image/png;base64,{}"

# Where each mode's decision lands: the span, and its attributes naming the prefiller (address,
# name) and the encoders (names). In sidecar the frontend names the decoder; the EPP adds P and E.
_EPP = (Epp.PICK, Epp.PREFILLER, Epp.PREFILLER_NAME, Epp.ENCODERS_NAMES)
_CALLOUT = (Callout.PICK, Callout.PREFILLER, Callout.PREFILLER_NAME, Callout.ENCODERS_NAMES)
DECISION = {"ext_proc": _EPP, "sidecar": _EPP, "lua-callout": _CALLOUT, "dynmod-callout": _CALLOUT}


def topology(mode: str, flow: str) -> Topology:
    return Topology(mode=mode, flow=flow, prefill=2, decode=1, encoders=2, encode_latency=20,
                    latency=MockLatency(time_to_first_token=40, inter_token_latency=5, kv_cache_transfer_latency=10),
                    options={"scorer": "round-robin"})


def chat(content) -> dict:
    return {"model": "mock-llm", "stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": content}]}


def with_images(n: int) -> list:
    return [{"type": "text", "text": "What is in the picture?"}] + [
        {"type": "image_url", "image_url": {"url": IMAGE.format(f"cGljdHVyZQ{i}" * 16)}} for i in range(n)]


def send(bed, body, *, media_items=0, headers=None) -> TraceCheck:
    client = bed.client()
    result = client.chat(body, headers=headers)
    client.flush()
    client.close()
    assert result.status == 200, (result.status, result.body, result.error)
    assert len(result.tokens) == 4
    trace = bed.jaeger.wait_for_trace(
        result.trace_id, bed.expected_spans(media_items), timeout_s=20)
    check = TraceCheck(trace)
    check.follows_contract()
    assert result.headers.get("x-inference-pod") == "vllm-d0"
    return check


def decision(check: TraceCheck, mode: str):
    return check.one(DECISION[mode][0])


def served_prefiller(check: TraceCheck) -> str:
    return check.one(Vllm.REQUEST, Service.VLLM, **{Vllm.ROLE: "prefill"}).attributes[Vllm.INSTANCE]


def assert_prefill_follows_the_decision(check: TraceCheck, mode: str, expected: str | None = None) -> str:
    span = decision(check, mode)
    _, prefiller, prefiller_name, _ = DECISION[mode]
    named = span.attributes.get(prefiller_name)
    assert named, f"{span.label} names no prefiller: {span.attributes}"
    if expected is not None:
        assert named == expected, f"{span.label} named {named}, expected the forced {expected}"
    served = served_prefiller(check)
    assert served == named, f"the picker chose {named} but {served} prefilled (the sidecar used its fallback?)"
    # The sidecar's own record agrees: the address it called is the one the picker named.
    assert check.one(Pd.PREFILL, Service.PD_SIDECAR).attributes[Pd.PREFILLER] == span.attributes[prefiller]
    check.before(span, check.one(Pd.PREFILL, Service.PD_SIDECAR))
    return named


@pytest.mark.parametrize("mode", PICKER_MODES)
def test_pd_prefill_runs_on_the_prefiller_the_picker_named(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode, "pd"))
    # 1. Forced to the second prefiller: the sidecar's fallback would take vllm-p0 here.
    check = send(bed, chat("Which prefiller?"), headers={"x-eppkit-force-prefiller": "vllm-p1"})
    assert_prefill_follows_the_decision(check, mode, expected="vllm-p1")
    # 2. The picker's own choice travels the same way.
    check = send(bed, chat("And now?"))
    assert_prefill_follows_the_decision(check, mode)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("mode", PICKER_MODES)
def test_epd_encoders_and_prefiller_are_the_ones_the_picker_named(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode, "epd"))
    # One image, forced to the second encoder and prefiller (the sidecar's fallbacks start at the first).
    check = send(bed, chat(with_images(1)), media_items=1,
                 headers={"x-eppkit-force-prefiller": "vllm-p1", "x-eppkit-force-encoders": "encoder-1"})
    assert_prefill_follows_the_decision(check, mode, expected="vllm-p1")
    encoders_names = DECISION[mode][3]
    assert decision(check, mode).attributes.get(encoders_names) == "encoder-1"
    assert [s.attributes[Encoder.INSTANCE] for s in check.all(Encoder.ENCODE, Service.ENCODER)] == ["encoder-1"]
    # Two images, unforced: one encoder per item, the ones the picker listed, then prefill.
    check = send(bed, chat(with_images(2)), media_items=2)
    assert_prefill_follows_the_decision(check, mode)
    named = decision(check, mode).attributes[encoders_names].split(",")
    used = sorted(s.attributes[Encoder.INSTANCE] for s in check.all(Encoder.ENCODE, Service.ENCODER))
    assert used == sorted(named) and len(named) == 2, (named, used)
    p_llm = check.one(Vllm.REQUEST, Service.VLLM, **{Vllm.ROLE: "prefill"})
    (p_prefill,) = [s for s in p_llm.children if s.name == Vllm.PREFILL]
    for encode in check.all(Encoder.ENCODE, Service.ENCODER):
        check.before(encode, p_prefill)
