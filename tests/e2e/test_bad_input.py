"""Bad input through Envoy, in every mode: a clear OpenAI-style error with the right status,
whoever answers (the picker, Envoy, or the backend), and nothing crashes.

| input | status | who answers |
|---|---|---|
| invalid JSON | 400 | the picker (every picker: ``invalid_json``); direct: the mock (vLLM's numeric code) |
| wrong content type (``text/plain``, a valid JSON body) | 415 | the mock (pickers read the body, the backend refuses the type, as vLLM does) |
| body over the backend's limit (9 MiB > 8 MiB) | 413 | the mock |
| body over Envoy's buffer limit (65 MiB > 64 MiB) | 413 | Envoy where a filter buffers the body (Lua, dynamic module), else the mock |
| multipart without a boundary | 400 | the picker (not JSON: ``invalid_json``); direct: the mock |
| multipart with a boundary but no parts | 400 | the same |
| unknown model | 404 ``model_not_found`` | the mock |
| empty body | 400 | the mock (EPP decides on headers alone), the callout |

All of them go through one testbed per mode, one after the other; then Envoy must be LIVE,
every component still running, and a good request served.
"""

import json

import pytest

from tests.support.reliability import MODES, assert_kit_healthy, assert_openai_error, chat_body, topology

pytestmark = pytest.mark.e2e

MIB = 1 << 20


def _prompt_body(size: int) -> bytes:
    """A completions request of about ``size`` bytes."""
    words = (size - 60) // 2
    return json.dumps({"model": "mock-llm", "max_tokens": 1, "prompt": "w " * words}).encode()


GOOD = json.dumps(chat_body()).encode()

CASES = [
    # (id, path, body, content type, status, error.code when every mode agrees on it,
    #  error.code when the picker answers: every picker mode agrees on it; direct has none)
    ("invalid-json", "/v1/chat/completions", b'{"model": "mock-llm", "messages": [', "application/json", 400, None,
     "invalid_json"),
    ("wrong-content-type", "/v1/chat/completions", GOOD, "text/plain", 415, "unsupported_media_type", None),
    ("over-backend-limit", "/v1/completions", _prompt_body(9 * MIB), "application/json", 413, None, None),
    ("over-envoy-limit", "/v1/completions", _prompt_body(65 * MIB), "application/json", 413, None, None),
    ("multipart-no-boundary", "/v1/chat/completions", b"--x\r\n\r\n{}", "multipart/mixed", 400, None,
     "invalid_json"),
    ("multipart-no-parts", "/v1/chat/completions", b"this has no delimiter at all", "multipart/mixed; boundary=XYZ",
     400, None, "invalid_json"),
    ("unknown-model", "/v1/chat/completions", json.dumps(chat_body(model="gpt-nope")).encode(), "application/json",
     404, "model_not_found", None),
    ("empty-body", "/v1/chat/completions", b"", "application/json", 400, None, None),
]


@pytest.mark.parametrize("mode", MODES)
def test_bad_input_gets_a_clear_openai_error_and_nothing_crashes(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode))
    client = bed.client()
    problems = []
    for case_id, path, body, content_type, status, code, picker_code in CASES:
        if mode != "direct" and picker_code is not None:
            code = picker_code
        result = client.chat({}, path=path, raw_body=body, content_type=content_type, timeout_s=60)
        try:
            assert result.error is None, f"the client got no answer: {result.error}"
            assert_openai_error(result.status, result.body, status, code=code)
            assert result.headers.get("content-type", "").startswith("application/json"), result.headers
        except AssertionError as exc:
            problems.append(f"{case_id}: {exc}")
    client.flush()
    assert not problems, f"{mode}:\n" + "\n".join(problems)
    assert_kit_healthy(bed)
    good = client.chat(chat_body())
    assert good.status == 200, good.body
