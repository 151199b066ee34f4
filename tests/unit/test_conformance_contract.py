"""The protocol's contract where no EPP decides, judged over what the client and Envoy saw: the EPP's 503 body as an
OpenAI-style error (a body the kit's Envoy had to wrap was not), fail-closed (5xx, no pod reached); and the echo EPP
that follows it and breaks it on demand (an ineligible subset, P/D roles)."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import pytest

from eppkit.conformance.checks import CHECKS
from eppkit.conformance.contract import (
    ENVOY_WRAPPED,
    answered_by_the_epp,
    error_body_problem,
    fail_closed_problems,
    judge_fail_closed,
)
from eppkit.services.echo_epp import MISBEHAVIOURS
from eppkit.services.echo_epp.server import EchoProcessor, Pool
from eppkit.services.picker import headers
from opentelemetry import trace as otel_trace

pytestmark = pytest.mark.unit

OPENAI = {"error": {"message": "no endpoint available", "type": "ServiceUnavailable", "param": None, "code": 503}}
WRAPPED = {"error": {"message": "no endpoint available for this request (epp_no_endpoint)", "type": ENVOY_WRAPPED,
                     "param": None, "code": "503"}}


class Hop(dict):
    def __init__(self, upstream="-", code=500, immediate=False):
        super().__init__(code=code, details="ext_proc_error_gRPC_error_14", flags="UAEX", route="picked",
                         upstream=upstream, destination=None, destination_header=None, served=None)
        self.ext_proc = {"received_immediate_response": immediate}

    def call_statuses(self):
        return {"request_header_call_status": 14}

    def phases(self):
        return {}


def sent(status, *, upstream="-", pod=None, immediate=False):
    return SimpleNamespace(result=SimpleNamespace(status=status, error=None, headers={"x-inference-pod": pod} if pod
                                                  else {}, body=None),
                           hop=Hop(upstream, status, immediate), protocol="http/1.1",
                           served_by=pod)


def test_an_openai_error_written_by_the_epp_is_its_body():
    assert error_body_problem(OPENAI) is None


def test_a_body_the_kit_s_envoy_wrapped_was_not_the_epp_s_json():
    problem = error_body_problem(WRAPPED)
    assert "its body is not JSON ('no endpoint available for this request (epp_no_endpoint)'" in problem
    assert ENVOY_WRAPPED in problem


@pytest.mark.parametrize("body", [None, "no endpoint", {"error": "no endpoint"}, {"message": "x"}])
def test_anything_else_is_no_openai_error(body):
    assert error_body_problem(body).startswith("its body is no OpenAI-style error")


def test_fail_closed_holds_when_every_request_is_answered_5xx_before_any_pod():
    assert fail_closed_problems([sent(500), sent(503)]) == []
    result = judge_fail_closed([sent(500)] * 4)
    assert result.status == "pass" and "ext_proc_error_gRPC_error_14" in result.evidence[0]


def test_fail_closed_breaks_when_a_request_reaches_a_pod_or_is_not_5xx():
    problems = fail_closed_problems([sent(200, upstream="127.0.0.2:8000", pod="vllm-1"), sent(429)])
    assert problems == ["request 1 reached vllm-1 (HTTP 200)", "request 2 got HTTP 429, not a 5xx"]
    assert judge_fail_closed([sent(200, upstream="127.0.0.2:8000", pod="vllm-1")]).status == "fail"


def test_the_epp_s_answer_is_awaited_then_judged_as_it_is():
    answers = iter([sent(503, upstream="127.0.0.2:1"), sent(503, immediate=True)])
    assert answers_of(lambda: next(answers)).hop.ext_proc["received_immediate_response"]
    never = answered_by_the_epp(lambda: sent(200, upstream="127.0.0.2:8000", pod="vllm-0"), 0.0)
    assert never.served_by == "vllm-0"


def answers_of(send):
    return answered_by_the_epp(send, 5.0, interval_s=0.0)


def test_the_new_checks_are_declared_where_they_belong():
    assert CHECKS.get("no-endpoint-503").level == "must"
    fail_closed = CHECKS.get("fail-closed")
    assert fail_closed.level == "should" and not fail_closed.per_protocol and fail_closed.declared is None


# The echo EPP: eligible pods within a subset hint answer a connection; P/D by the pods' llm-d.ai/role.


def decide(epp, found=None, subset=None):
    return asyncio.run(epp.decide(found or {}, subset))


def destination(reply) -> str:
    return reply.dynamic_metadata.fields["envoy.lb"].struct_value.fields[headers.DESTINATION].string_value


def set_headers(reply) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() or h.header.value
            for h in reply.request_headers.response.header_mutation.set_headers}


@pytest.fixture
def listening():
    """An address that accepts connections (a pod that is up)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_the_echo_epp_answers_503_with_openai_json_for_a_subset_of_pods_that_are_down(listening):
    down = "127.0.0.1:1"
    epp = EchoProcessor(Pool([listening, down]), otel_trace.get_tracer("t"))
    assert destination(decide(epp, subset=(listening,))) == listening
    reply = decide(epp, subset=(down,))
    assert reply.immediate_response.status.code == 503
    assert b'"error"' in reply.immediate_response.body


def test_its_subset_faults(listening):
    down = "127.0.0.1:1"
    ignored = EchoProcessor(Pool([listening, down]), otel_trace.get_tracer("t"), misbehave="empty-subset-ignored")
    assert destination(decide(ignored, subset=("10.0.0.1:1",)))
    plain = EchoProcessor(Pool([listening, down]), otel_trace.get_tracer("t"), misbehave="non-openai-503")
    reply = decide(plain, subset=(down,))
    assert reply.immediate_response.status.code == 503
    assert reply.immediate_response.body == b"no endpoint available for this request"
    assert not reply.immediate_response.headers.set_headers  # no content-type: Envoy's mapper wraps it


P, D0, D1 = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"
ROLES = {P: "prefill", D0: "decode", D1: "decode"}


def test_the_echo_epp_picks_a_decode_pod_and_names_the_prefill_pod():
    epp = EchoProcessor(Pool([P, D0, D1], ROLES), otel_trace.get_tracer("t"), max_fallbacks=0)
    for _ in range(3):
        reply = decide(epp)
        assert destination(reply) in (D0, D1)
        assert set_headers(reply)[headers.PREFILLER] == P


def test_without_prefill_only_pods_it_names_no_prefiller():
    epp = EchoProcessor(Pool([P, D0], {P: "both", D0: "both"}), otel_trace.get_tracer("t"))
    assert headers.PREFILLER not in set_headers(decide(epp))


@pytest.mark.parametrize("fault, wrong", [("prefill-as-destination", "destination"),
                                          ("decode-as-prefiller", "prefiller")])
def test_its_p_d_faults(fault, wrong):
    assert fault in MISBEHAVIOURS
    epp = EchoProcessor(Pool([P, D0, D1], ROLES), otel_trace.get_tracer("t"), misbehave=fault, max_fallbacks=0)
    reply = decide(epp)
    if wrong == "destination":
        assert destination(reply) == P and set_headers(reply)[headers.PREFILLER] == P
    else:
        assert destination(reply) in (D0, D1) and set_headers(reply)[headers.PREFILLER] == D0
