"""The kit's load client (eppkit/loadgen, driven by eppkit.native_load) against a small server of the test's own: each
answer is told to its request, a stream without its [DONE] and an error are lost in the Sample's words, the traces
it carries are each request's own (one in TRACED_EVERY sampled), and a halt stops it sending. The soak it drives
through Envoy, over HTTP/1.1 and h2c: tests/e2e/test_conformance_suite.py."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading

import pytest
from aiohttp import web

from eppkit.builds.own_go import LOAD_CLIENT
from eppkit.native_load import TRACED_EVERY, NativeDriver
from eppkit.pytest_plugin.state import require
from eppkit.workload import Load, PlannedRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def binary():
    require(shutil.which("go") is not None, "the load client is a Go program: install Go (https://go.dev/dl/)")
    return LOAD_CLIENT.build(lambda message: None)


@pytest.fixture
def server():
    """An OpenAI-ish server on a free port: a body's "say" steers the answer (ok, error, cut, slow); every
    request's traceparent kept."""
    seen: list[str] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(request.headers.get("traceparent", ""))
        say = body.get("say", "ok")
        if say == "slow":
            await asyncio.sleep(0.05)
        if say == "error":
            return web.json_response({"error": {"message": "no"}}, status=503)
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "hi"}}]},
                                     headers={"x-inference-pod": "pod-a"})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
        if say != "cut":
            await resp.write(b"data: [DONE]\n\n")
        return resp

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", seen
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())
    loop.close()


def _plan(says: list[tuple[str, bool]]) -> list[PlannedRequest]:
    return [PlannedRequest(i, {"model": "m", "say": say, "stream": stream}, 1, 0) for i, (say, stream) in
            enumerate(says)]


def test_each_answer_is_told_to_its_request_and_a_loss_is_named(binary, server):
    url, seen = server
    says = [("ok", False), ("ok", True), ("error", False), ("cut", True), ("slow", False)] * 20
    run = NativeDriver(url, Load(requests=len(says), concurrency=8, max_duration_s=30, request_timeout_s=5),
                       binary=binary).run(_plan(says))
    assert [s.index for s in run.samples] == list(range(len(says))) and run.stopped is None
    kinds = {say: {s.error for s in run.samples if says[s.index][0] == say} for say, _ in says}
    assert kinds == {"ok": {None}, "slow": {None}, "error": {"http_503"}, "cut": {"stream_incomplete"}}
    assert all(s.status == 503 and "no" in s.detail for s in run.samples if says[s.index][0] == "error")
    assert {s.pod for s in run.samples if says[s.index] == ("ok", False)} == {"pod-a"}
    # each request its own trace, and one in TRACED_EVERY sampled (a trace to look at; the rest cost no spans)
    traces = {s.trace_id for s in run.samples}
    assert len(traces) == len(says) and {t.split("-")[1] for t in seen} == traces
    assert sum(t.endswith("-01") for t in seen) == len(says) // TRACED_EVERY


def test_a_halt_stops_it_sending_and_says_why(binary, server):
    url, _ = server
    says = [("slow", False)] * 400
    driver = NativeDriver(url, Load(requests=len(says), concurrency=2, max_duration_s=30, request_timeout_s=5),
                          binary=binary,
                          on_progress=lambda done, total, errors, s: done >= 10 and driver.halt("enough said"))
    run = driver.run(_plan(says))
    assert 10 <= len(run.samples) < 100, len(run.samples)
    assert run.stopped.startswith("enough said: stopped after"), run.stopped
    assert all(s.ok for s in run.samples)


def test_the_plan_is_bounded_in_time(binary, server):
    url, _ = server
    run = NativeDriver(url, Load(requests=1000, concurrency=1, max_duration_s=0.5, request_timeout_s=5),
                       binary=binary).run(_plan([("slow", False)] * 1000))
    assert len(run.samples) < 100 and "max duration" in run.stopped, run.stopped
    assert json.dumps([s.to_json() for s in run.samples])  # plain data, as the workload's samples are
