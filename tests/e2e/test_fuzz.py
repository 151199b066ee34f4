"""Property-based fuzzing through Envoy, in every mode: generated bodies and headers for
``/v1/chat/completions`` and ``/v1/completions``, bounded in count and in time.

For every generated request:
- an answer arrives (no hang, no dropped connection);
- a client mistake is a client error: the status is below 500;
- an error is OpenAI-style JSON (``{"error": {"message", "type", ...}}``, ``application/json``);
- the next good request is a 200.
After the run every component is still running and Envoy is LIVE.

Bounds: ``EPPKIT_FUZZ_EXAMPLES`` cases per path and mode (default 150, so 300 per mode) and
``EPPKIT_FUZZ_SECONDS`` per path and mode (default 90): past the deadline the remaining examples
are not sent. One testbed per mode serves both paths (``eppkit_shared_testbed_factory``). The counts
of each run are printed and recorded as test properties (docs/reliability.md has the latest).

Not generated: framing headers (Content-Length, Transfer-Encoding, Host, Connection, ...; the raw
HTTP tests in test_hostile_envoy.py cover those) and the kit's test-steering headers (``x-mock-*``
injects failures on purpose, ``x-eppkit-*`` forces or sheds a pick).
"""

from __future__ import annotations

import json
import os
import string
import time
from collections import Counter

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support.reliability import MODES, assert_kit_healthy, assert_openai_error, chat_body, topology

# Under pytest-xdist each mode's shared testbed is a group of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_share_per("mode")]

EXAMPLES = int(os.environ.get("EPPKIT_FUZZ_EXAMPLES", "150"))
SECONDS = float(os.environ.get("EPPKIT_FUZZ_SECONDS", "90"))
PATHS = ("/v1/chat/completions", "/v1/completions")
MODEL = "mock-llm"

# -- bodies ------------------------------------------------------------------------------------------

_text = st.text(max_size=40)
_weird_numbers = st.one_of(st.integers(min_value=-(2**63), max_value=2**64), st.floats(allow_nan=False),
                           st.sampled_from([0, -1, 1, 2, 7, 64, 4096, 10**9]))
_scalars = st.one_of(st.none(), st.booleans(), _weird_numbers, _text)
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_text, inner, max_size=4)), max_leaves=12)
_model = st.one_of(st.just(MODEL), st.just(MODEL), _text, _scalars, st.just(MODEL + "\n"), st.just(" " + MODEL))
_base64ish = st.text(alphabet=string.ascii_letters + string.digits + "+/=@%! ", max_size=24)
_url = st.one_of(st.builds(lambda b: "data:image/png;base64," + b, _base64ish), st.just("http://127.0.0.1/cat.png"),
                 _text, _weird_numbers, st.none())
_media_payload = st.one_of(st.fixed_dictionaries({"url": _url}), _url, _json)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(_text, _scalars)}),
    st.builds(lambda kind, payload: {"type": kind, kind: payload},
              st.sampled_from(["image_url", "audio_url", "input_audio"]), _media_payload),
    st.fixed_dictionaries({"type": _text}),
    _json,
)
_content = st.one_of(_text, st.lists(_part, max_size=4), _scalars, _json)
_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool"]), "content": _content}),
    st.fixed_dictionaries({}, optional={"role": st.one_of(_text, _scalars), "content": _content}),
    _json,
)
_prompt = st.one_of(_text, st.lists(_text, max_size=3), st.lists(st.integers(-5, 70000), max_size=6),
                    st.lists(st.lists(st.integers(-5, 70000), max_size=4), max_size=3), _json)
_common = {
    "model": _model,
    "max_tokens": st.one_of(st.integers(-3, 40), _weird_numbers, _scalars),
    "max_completion_tokens": st.one_of(st.integers(-3, 40), _scalars),
    "stream": st.one_of(st.booleans(), _scalars),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.one_of(st.booleans(), _scalars)}), _json),
    "temperature": _scalars, "top_p": _scalars, "seed": _scalars, "n": _scalars,
    "kv_transfer_params": _json,
    "stop": _json, "logprobs": _scalars, "user": _scalars,
}


def _body(path: str):
    chat = path.endswith("chat/completions")
    specific = {"messages": st.one_of(st.lists(_message, max_size=4), _json)} if chat else {"prompt": _prompt}
    fields = {**specific, **_common}
    # A good request with one or two fields replaced: deep enough to reach the pickers and the backend.
    good = {"model": MODEL, "max_tokens": 3,
            **({"messages": [{"role": "user", "content": "Which pod am I on?"}]} if chat else {"prompt": "Which pod"})}
    near_good = st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: fields[k] for k in keys})).map(lambda changed: {**good, **changed})
    shaped = st.fixed_dictionaries({}, optional=fields)
    as_json = st.one_of(near_good, near_good, shaped, _json).map(lambda v: json.dumps(v).encode())
    truncated = st.tuples(near_good, st.integers(1, 80)).map(lambda t: json.dumps(t[0]).encode()[: t[1]])
    return st.one_of(as_json, as_json, as_json, truncated, st.binary(max_size=64), st.text(max_size=64).map(str.encode))


# -- headers -----------------------------------------------------------------------------------------

_FRAMING = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "upgrade",
            "proxy-connection", "expect", "content-type"}
_token = st.text(alphabet=string.ascii_letters + string.digits + "!#$%&'*+.^_`|~-", min_size=1, max_size=24)
_header_name = st.one_of(
    st.sampled_from(["x-gateway-destination-endpoint", "x-gateway-model-name", "x-gateway-worker-id",
                     "x-prefiller-host-port", "x-encoder-hosts-ports", "x-envoy-original-dst-host",
                     "x-routing-request", "x-request-id", "traceparent", "tracestate", "accept",
                     "accept-encoding", "authorization", "x-forwarded-for", "x-envoy-upstream-rq-timeout-ms",
                     "x-envoy-max-retries", "x-envoy-retry-on", "content-encoding"]),
    _token,
).filter(lambda n: n.lower() not in _FRAMING and not n.lower().startswith(("x-mock-", "x-eppkit-", ":")))
# A header value a client library can send: visible ASCII and inner spaces, no CR/LF.
_header_value = st.text(alphabet=string.printable.replace("\r", "").replace("\n", "").replace("\x0b", "")
                        .replace("\x0c", "").replace("\t", ""), max_size=60).map(str.strip)
_content_type = st.sampled_from(["application/json", "application/json", "application/json; charset=utf-8", "text/plain", "",
                                 "multipart/mixed", "multipart/mixed; boundary=x", "application/x-www-form-urlencoded",
                                 "application/jsonx", "*/*"])


def _case(path: str):
    return st.fixed_dictionaries({
        "body": _body(path),
        "content_type": _content_type,
        "headers": st.dictionaries(_header_name, _header_value, max_size=4),
    })


# -- the run -----------------------------------------------------------------------------------------

GOOD = json.dumps(chat_body(max_tokens=2)).encode()
PICKER_DEADLINES = {"lua-callout": {"callout_timeout_ms": 10000}, "dynmod-callout": {"callout_timeout_ms": 10000},
                    "sidecar": {"epp_args": ["--frontend-timeout", "10"]}}


def _send(session: requests.Session, url: str, case: dict) -> requests.Response:
    headers = {k: v for k, v in case["headers"].items()}
    if case["content_type"]:
        headers["Content-Type"] = case["content_type"]
    return session.post(url, data=case["body"], headers=headers, timeout=30)


def _check(resp: requests.Response) -> None:
    assert resp.status_code < 500, f"HTTP {resp.status_code} for a client's request: {resp.text[:500]!r}"
    if resp.status_code >= 400:
        assert resp.headers.get("content-type", "").startswith("application/json"), (resp.headers, resp.text[:300])
        assert_openai_error(resp.status_code, resp.json(), resp.status_code)


@pytest.mark.eppkit_needs_mock("starts the mock with its own flags")
@pytest.mark.parametrize("path", PATHS, ids=["chat", "completions"])
@pytest.mark.parametrize("mode", MODES)
def test_fuzzed_requests_get_client_errors_as_json_and_break_nothing(eppkit_shared_testbed_factory, mode, path,
                                                                      record_property):
    # Pickers get the load test's generous deadlines: on a starved 2-core host a 1 s callout deadline
    # turns a slow pick into a 502, which is a timeout setting, not the answer to a bad request.
    bed = eppkit_shared_testbed_factory(topology(mode, ttft_ms=1.0, itl_ms=0.1, vllm_args=("--max-model-len", "512"),
                                                 **PICKER_DEADLINES.get(mode, {})))
    url = bed.envoy_url + path
    session = requests.Session()
    deadline = time.monotonic() + SECONDS
    statuses: Counter = Counter()
    tried = {"cases": 0, "skipped_after_deadline": 0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
              phases=(Phase.explicit, Phase.generate),  # no shrinking: the failing case is reported as sent
              suppress_health_check=list(HealthCheck))
    @given(case=_case(path))
    def one(case):
        if time.monotonic() > deadline:
            tried["skipped_after_deadline"] += 1
            return
        tried["cases"] += 1
        try:
            resp = _send(session, url, case)
        except requests.RequestException as exc:
            raise AssertionError(f"no answer: {type(exc).__name__}: {exc}") from None
        statuses[resp.status_code] += 1
        _check(resp)
        good = session.post(bed.envoy_url + "/v1/chat/completions", data=GOOD,
                            headers={"Content-Type": "application/json"}, timeout=30)
        assert good.status_code == 200, f"the good request after it: HTTP {good.status_code} {good.text[:300]!r}"

    try:
        one()
    finally:
        summary = {"mode": mode, "path": path, **tried, "crashes": len(_not_running(bed)),
                   "statuses": dict(sorted(statuses.items()))}
        print(f"\nfuzz {json.dumps(summary)}")
        for key, value in summary.items():
            record_property(f"fuzz_{key}", value)
    assert tried["cases"] >= min(EXAMPLES, 20), f"only {tried['cases']} cases ran before the deadline"
    assert_kit_healthy(bed)


def _not_running(bed) -> list[str]:
    return [name for name, proc in bed.processes().items() if not proc.is_running()]
