"""JaegerClient on Jaeger v2's /api/v3 answers as measured (text/plain OTLP JSON; 404 JSON), no processes."""

import json
from pathlib import Path

import pytest
import requests
from eppkit.observability.contract import Callout, Client, Dynmod, Envoy, Vllm
from eppkit.observability.jaeger_client import JaegerClient, TraceIncomplete

pytestmark = pytest.mark.unit

TRACE = json.loads((Path(__file__).parent / "data" / "traces" / "pd-dynmod-callout.json").read_text())
NOT_FOUND = {"error": {"httpCode": 404, "message": "No traces found"}}


class Answer:
    def __init__(self, status, body):
        self.status_code, self.text = status, json.dumps(body)
        self.headers = {"content-type": "text/plain; charset=utf-8"}

    def raise_for_status(self):
        if self.status_code >= 400:
            raise requests.HTTPError(f"HTTP {self.status_code}")


def client_answering(*answers):
    client = JaegerClient("http://127.0.0.1:9")
    seen = []

    def get(url, params=None, timeout=None):
        seen.append((url, params))
        return answers[min(len(seen), len(answers)) - 1]

    client._session.get = get
    return client, seen


def test_a_trace_is_read_from_the_v3_api_without_adjusters():
    client, seen = client_answering(Answer(200, {"result": TRACE}))
    trace = client.get_trace("abc")
    assert seen == [("http://127.0.0.1:9/api/v3/traces/abc", {"raw_traces": "true"})]
    assert trace.one(Dynmod.CALLOUT).parent is trace.one(Envoy.INGRESS)
    assert len(trace.find_all(Vllm.REQUEST)) == 2


def test_not_found_is_none_and_waiting_names_what_is_missing():
    client, _ = client_answering(Answer(404, NOT_FOUND))
    assert client.get_trace("abc") is None
    with pytest.raises(TraceIncomplete, match=r"missing client:client.request; Jaeger has: nothing"):
        client.wait_for_trace("abc", [Client.REQUEST], timeout_s=0.05, poll_s=0.01)


def test_waiting_returns_once_the_expected_spans_are_there_and_quiet():
    client, seen = client_answering(Answer(404, NOT_FOUND), Answer(200, {"result": TRACE}))
    trace = client.wait_for_trace("abc", [Callout.PICK, ("vllm", Vllm.QUEUE)], quiet_s=0.02, poll_s=0.01)
    assert trace.count(Callout.PICK) == 1 and len(seen) >= 3  # not found, found, found again (quiet)


def test_many_traces_at_once_say_what_each_lacks():
    client, _ = client_answering(Answer(200, {"result": TRACE}))
    out = client.wait_for_traces({"a": [Callout.PICK], "b": [Vllm.REQUEST, Vllm.AWAIT_METADATA]}, timeout_s=0.05,
                                 settle_s=0, poll_s=0.01)
    assert out["a"] == (TRACE, [])
    assert out["b"] == (TRACE, ["vllm:vllm.await_metadata"])
