"""Failure injection (by flag rate and by x-mock-failure) and client cancellations."""

import asyncio
import json

import aiohttp
import pytest
from eppkit.observability.contract import Mock, Stream, Vllm
from eppkit.services.vllm.failures import FailureInjector
from eppkit.services.vllm.testing import chat_body, in_process, make_mock

pytestmark = pytest.mark.unit


def run(coro):
    return asyncio.run(coro)


# --- the injector alone --------------------------------------------------------------

def test_rate_draws_are_seeded_and_near_the_rate():
    a = FailureInjector(25, ["500", "429"], 1, seed=3)
    b = FailureInjector(25, ["500", "429"], 1, seed=3)
    seq_a = [a.choose({}) for _ in range(2000)]
    seq_b = [b.choose({}) for _ in range(2000)]
    assert seq_a == seq_b
    failed = [f for f in seq_a if f is not None]
    assert 400 < len(failed) < 600
    assert {f.kind for f in failed} == {"500", "429"}
    assert [FailureInjector(25, ["500"], 1, seed=4).choose({}) for _ in range(50)] != seq_a[:50]


@pytest.mark.parametrize(
    "header, kind",
    [
        ("500", "500"),
        ("429", "429"),
        ("context-length", "context-length"),
        ("stall", "stall"),
        ("disconnect", "disconnect"),
        ("server_error", "500"),  # llm-d-inference-sim spelling
        ("rate_limit", "429"),
    ],
)
def test_header_forces_a_failure_whatever_the_rate(header, kind):
    f = FailureInjector(0, [], 1, 0).choose({"x-mock-failure": header})
    assert f.kind == kind and f.source == "header"


def test_header_none_switches_injection_off_and_bad_values_raise():
    assert FailureInjector(100, ["500"], 1, 0).choose({"x-mock-failure": "none"}) is None
    with pytest.raises(ValueError, match="unknown failure type"):
        FailureInjector(0, [], 1, 0).choose({"x-mock-failure": "boom"})
    with pytest.raises(ValueError, match="x-mock-failure-after-tokens"):
        FailureInjector(0, [], 1, 0).choose({"x-mock-failure": "stall", "x-mock-failure-after-tokens": "x"})


# --- the server ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "header, status, text",
    [
        ("500", 500, "injected failure"),
        ("429", 429, "rate limit"),
        ("context-length", 400, "maximum context length is 8192 tokens"),
    ],
)
def test_immediate_failures_answer_openai_errors(header, status, text):
    mock, rec = make_mock(time_to_first_token=0)

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post("/v1/chat/completions", json=chat_body(), headers={"x-mock-failure": header})
            body = await r.json()
            metrics = await (await c.get("/metrics")).text()
            return r, body, metrics

    resp, body, metrics = run(go())
    assert resp.status == status
    assert resp.headers["x-inference-pod"] == "vllm-0"
    assert text in body["error"]["message"]
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    root = rec.one(Vllm.REQUEST)
    assert root.status.status_code.name == "ERROR"
    assert root.attributes[Mock.FAILURE] == header
    assert f'eppkit_mock_injected_failures_total{{engine="0",model_name="mock-llm",type="{header}"}} 1.0' in metrics


def test_rate_100_percent_fails_every_request():
    mock, _ = make_mock(time_to_first_token=0, failure_injection_rate=100, failure_types=["429"])

    async def go():
        async with in_process(mock.make_app()) as c:
            return [(await c.post("/v1/chat/completions", json=chat_body())).status for _ in range(5)]

    assert run(go()) == [429] * 5


async def _stream_until_broken(c, headers, timeout=5.0):
    """Read a stream; return (tokens seen: events with content, saw [DONE], error name or None, seconds)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    events, done, error = 0, False, None
    try:
        r = await c.post("/v1/chat/completions", json=chat_body(max_tokens=10, stream=True), headers=headers)
        async with asyncio.timeout(timeout):
            async for line in r.content:
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: "):  # the role-only chunk first (vLLM's order) is no token
                    events += bool(((json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}).get("content"))
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionError) as exc:
        error = type(exc).__name__
    return events, done, error, loop.time() - t0


def test_disconnect_mid_stream_after_n_tokens():
    mock, rec = make_mock(time_to_first_token=10, inter_token_latency=5)

    async def go():
        async with in_process(mock.make_app()) as c:
            res = await _stream_until_broken(c, {"x-mock-failure": "disconnect", "x-mock-failure-after-tokens": "3"})
            health = (await c.get("/health")).status
            return res, health

    (events, done, error, _), health = run(go())
    assert events == 3 and not done and error is not None
    assert health == 200  # the server lives on
    root = rec.one(Vllm.REQUEST)
    assert Vllm.INJECTED_DISCONNECT in [e.name for e in root.events]
    assert root.status.status_code.name == "ERROR"


def test_stall_hangs_then_drops_the_connection():
    mock, rec = make_mock(time_to_first_token=10, inter_token_latency=5, stall_timeout=300)

    async def go():
        async with in_process(mock.make_app()) as c:
            return await _stream_until_broken(c, {"x-mock-failure": "stall"})  # default: after 1 token

    events, done, error, seconds = run(go())
    assert events == 1 and not done and error is not None
    assert 0.29 < seconds < 2.0
    assert [e.name for e in rec.one(Vllm.REQUEST).events][:3] == [Mock.FAILURE_INJECTED, Stream.FIRST_TOKEN, Vllm.STALL_STARTED]


def test_stall_before_any_token_times_out_a_non_streaming_client():
    mock, _ = make_mock(time_to_first_token=10, stall_timeout=5000)

    async def go():
        async with in_process(mock.make_app()) as c:
            with pytest.raises(asyncio.TimeoutError):
                await c.post("/v1/chat/completions", json=chat_body(), headers={"x-mock-failure": "stall", "x-mock-failure-after-tokens": "0"},
                             timeout=aiohttp.ClientTimeout(total=0.3))

    run(go())


CANCELLED = 'eppkit_mock_client_cancellations_total{engine="0",model_name="mock-llm"} 1.0'


@pytest.mark.parametrize("phase_ms, ttft, stream", [(100, 1000, False), (100, 1000, True), (300, 50, True)], ids=["prefill", "prefill-stream", "decode-stream"])
def test_client_cancellation_is_counted_and_marked_on_the_span(phase_ms, ttft, stream):
    mock, rec = make_mock(time_to_first_token=ttft, inter_token_latency=20)

    async def go():
        async with in_process(mock.make_app()) as c:
            async def call():
                r = await c.post("/v1/chat/completions", json=chat_body(max_tokens=100, stream=stream))
                await r.read()

            task = asyncio.ensure_future(call())
            await asyncio.sleep(phase_ms / 1000)
            task.cancel()  # the client goes away: aiohttp closes the connection
            # noticed by the mock's disconnect watch (a loaded CI worker: later than 0.3 s once)
            deadline = asyncio.get_running_loop().time() + 5.0
            while True:
                await asyncio.sleep(0.05)
                metrics = await (await c.get("/metrics")).text()
                if CANCELLED in metrics or asyncio.get_running_loop().time() > deadline:
                    break
            running = mock.scheduler.running
            return metrics, running

    metrics, running = run(go())
    assert CANCELLED in metrics
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="mock-llm"} 1.0' in metrics
    assert running == 0  # the slot was given back
    root = rec.one(Vllm.REQUEST)
    assert root.attributes[Vllm.CANCELLED] is True
    assert Vllm.CLIENT_CANCELLED in [e.name for e in root.events]
    assert root.status.description == "client disconnected"
    # noticed when the client went, not at the end of the 1 s prefill / 2 s decode it was in
    assert (root.end_time - root.start_time) / 1e6 < (ttft if phase_ms < ttft else ttft + 100 * 20)
