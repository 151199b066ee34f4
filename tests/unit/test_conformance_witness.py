"""Data lost on the way is said with its counts wherever a check meets it (eppkit.conformance.witness): a request the
backend answered with an error names the backend's words and the bytes of the body that arrived of the client's; a
streamed answer cut short names the tokens that arrived and the missing ``[DONE]``."""

from __future__ import annotations

import pytest

from eppkit.conformance.witness import Sent, backend_said, cause, stream_cut
from eppkit.gateway.hop import Hop
from eppkit.observability.client import ClientResult
from eppkit.services.openai_errors import error_body
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_POD

pytestmark = pytest.mark.unit


def answered(status: int, *, received: int | None, sent: int, message: str = "Invalid JSON in request body") -> Sent:
    headers = {HEADER_POD: "vllm-0", **({HEADER_BODY_BYTES: str(received)} if received is not None else {})}
    result = ClientResult(trace_id="t", status=status, headers=headers, body=error_body(status, message),
                          request_bytes=sent)
    hop = Hop({"code": status, "details": "via_upstream", "flags": "-", "upstream": "127.0.0.2:8000"})
    return Sent(result, hop)


def test_backend_said_of_a_body_cut_short_names_its_counts():
    said = backend_said(answered(400, received=65_536, sent=1_200_000))
    assert said == ("the backend (vllm-0) answered HTTP 400: Invalid JSON in request body; of the request's body "
                    "65,536 of 1,200,000 bytes arrived: data lost on the way"), said


def test_backend_said_of_a_whole_body_names_no_loss():
    said = backend_said(answered(404, received=52, sent=52, message="The model `x` does not exist."))
    assert said == "the backend (vllm-0) answered HTTP 404: The model `x` does not exist.", said
    assert backend_said(answered(200, received=10, sent=52)) is None  # served: body-values-kept's to judge
    assert "bytes arrived" not in backend_said(answered(400, received=None, sent=52))  # no length said


def test_cause_of_a_request_the_backend_refused_quotes_the_backend():
    words = cause(answered(400, received=0, sent=52))
    assert words.startswith("HTTP 400, the backend (vllm-0) answered HTTP 400"), words
    assert "0 of 52 bytes arrived: data lost on the way" in words, words


def test_stream_cut_names_the_tokens_that_arrived_and_the_missing_done():
    whole = ClientResult(trace_id="t", status=200, headers={}, tokens=["a", "b"], events=[{}, {}, {"done": True}])
    assert stream_cut(whole, 2) is None
    dropped = ClientResult(trace_id="t", status=200, headers={}, tokens=["a"], events=[{}])
    assert stream_cut(dropped, 8) == "1 of 8 tokens arrived, and no [DONE]"
    short = ClientResult(trace_id="t", status=200, headers={}, tokens=["a"], events=[{}, {"done": True}])
    assert stream_cut(short, 2) == "1 of 2 tokens arrived"
