"""The official openai client against the mock vLLM running as its own process."""

import subprocess
import sys
import urllib.request

import openai
import pytest

from eppkit.components.process import ServiceProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def vllm():
    with ServiceProcess("eppkit.services.vllm", ["--instance", "it-0", "--time-to-first-token", "50", "--inter-token-latency", "5",
                                       "--served-model-name", "mock-llm", "--served-model-name", "alt"]) as proc:
        yield proc


@pytest.fixture
def client(vllm):
    return openai.OpenAI(base_url=f"{vllm.url}/v1", api_key="unused", max_retries=0, timeout=10)


def test_chat_non_streaming(client):
    raw = client.chat.completions.with_raw_response.create(model="mock-llm", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert raw.headers["x-inference-pod"] == "it-0"
    resp = raw.parse()
    assert resp.choices[0].message.role == "assistant"
    assert len(resp.choices[0].message.content.split()) == 5
    assert resp.usage.completion_tokens == 5 and resp.choices[0].finish_reason == "length"


def test_chat_streaming_with_usage(client):
    stream = client.chat.completions.create(
        model="alt", messages=[{"role": "user", "content": "hi"}], max_tokens=7, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 7
    assert chunks[-1].usage.completion_tokens == 7
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_completions_both_ways(client):
    resp = client.completions.create(model="mock-llm", prompt="once", max_tokens=3)
    assert len(resp.choices[0].text.split()) == 3
    parts = [c.choices[0].text for c in client.completions.create(model="mock-llm", prompt="once", max_tokens=3, stream=True) if c.choices]
    assert "".join(parts) == resp.choices[0].text  # same seed and prompt: same text


def test_models_and_errors_map_to_openai_exceptions(client):
    assert {m.id for m in client.models.list()} == {"mock-llm", "alt"}
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="mock-llm", messages=[{"role": "user", "content": "x"}], extra_headers={"x-mock-failure": "429"})
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="mock-llm", messages=[{"role": "user", "content": "x"}], extra_headers={"x-mock-failure": "500"})
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="mock-llm", messages=[{"role": "user", "content": "x"}], extra_headers={"x-mock-failure": "context-length"})


def test_metrics_endpoint(vllm):
    with urllib.request.urlopen(f"{vllm.url}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "vllm:num_requests_running" in text and "vllm:kv_cache_usage_perc" in text


def test_pd_handshake_across_two_processes():
    with ServiceProcess("eppkit.services.vllm", ["--role", "prefill", "--instance", "p", "--time-to-first-token", "30"]) as p, \
         ServiceProcess("eppkit.services.vllm", ["--role", "decode", "--instance", "d", "--kv-cache-transfer-latency", "10", "--inter-token-latency", "2"]) as d:
        pc = openai.OpenAI(base_url=f"{p.url}/v1", api_key="x", max_retries=0)
        dc = openai.OpenAI(base_url=f"{d.url}/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "tell me"}]
        pr = pc.chat.completions.create(model="mock-llm", messages=msgs, max_tokens=1, seed=11,
                                        extra_body={"kv_transfer_params": {"do_remote_decode": True}})
        params = pr.model_extra["kv_transfer_params"]
        assert params["do_remote_prefill"] is True
        dr = dc.chat.completions.create(model="mock-llm", messages=msgs, max_tokens=4, seed=11, extra_body={"kv_transfer_params": params})
        assert dr.choices[0].message.content.split()[0] == pr.choices[0].message.content


@pytest.mark.parametrize("args, message", [
    (["--time-to-first-token", "-5"], "cannot be negative"),
    (["--inter-token-latency", "10", "--inter-token-latency-std-dev", "5"], "30%"),
])
def test_bad_flags_exit_with_a_message(args, message):
    out = subprocess.run([sys.executable, "-m", "eppkit.services.vllm", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and message in out.stderr


def test_sigint_ends_open_streams_promptly():
    """A testbed's SIGINT must not wait for open (or stalled) streams: exit 0 at once."""
    import time

    proc = ServiceProcess("eppkit.services.vllm", ["--time-to-first-token", "10", "--inter-token-latency", "100"]).start()
    try:
        client = openai.OpenAI(base_url=f"{proc.url}/v1", api_key="x", max_retries=0, timeout=10)
        stream = client.chat.completions.create(model="mock-llm", messages=[{"role": "user", "content": "x"}], max_tokens=1000, stream=True)
        next(iter(stream))
        started = time.monotonic()
        proc.stop(grace_s=10)
        assert time.monotonic() - started < 3
        assert proc.returncode() == 0
    finally:
        proc.stop()
