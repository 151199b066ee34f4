"""Seeded request plans, error kinds, and the bounded driver (against a fake client: no processes)."""

import threading
import time

import pytest
from eppkit.observability.client import ClientResult

from eppkit.workload import SCENARIOS, Driver, Load, classify, plan_requests
from tests.support.imports import ROOT

pytestmark = pytest.mark.unit


# -- plans -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_same_seed_plans_the_same_requests(name):
    scenario = SCENARIOS[name]
    assert plan_requests(scenario, 5, seed=7) == plan_requests(scenario, 5, seed=7)
    assert plan_requests(scenario, 5, seed=7) != plan_requests(scenario, 5, seed=8)
    assert plan_requests(scenario, 3, seed=7) == plan_requests(scenario, 5, seed=7)[:3], "a prefix of a longer plan"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_plans_stay_within_the_scenario_ranges(name):
    scenario = SCENARIOS[name]
    for req in plan_requests(scenario, 20, seed=1):
        lo, hi = scenario.max_tokens
        assert lo <= req.body["max_tokens"] <= hi
        assert scenario.prompt_words[0] <= req.prompt_words <= scenario.prompt_words[1]
        assert scenario.media_items[0] <= req.media_items <= scenario.media_items[1]
        assert req.stream is scenario.stream
        content = req.body["messages"][0]["content"]
        if req.media_items:
            images = [part for part in content if part["type"] == "image_url"]
            assert len(images) == req.media_items
            assert all(img["image_url"]["url"].startswith("data:image/png;base64,") for img in images)
        else:
            assert isinstance(content, str) and len(content.split()) == req.prompt_words


def test_prompt_sizes_come_in_turn_at_their_size():
    planned = plan_requests(SCENARIOS["prompt-sizes"], 7, seed=3)
    assert [r.prompt_kb for r in planned] == [1, 4, 16, 64, 256, 1, 4]
    for r in planned:
        size = len(r.body["messages"][0]["content"].encode())
        assert r.prompt_kb * 1024 <= size < r.prompt_kb * 1024 + 20, (r.prompt_kb, size)


def test_docs_compare_md_has_one_row_per_scenario_with_its_flow():
    text = (ROOT / "docs" / "compare.md").read_text().split("## Scenarios", 1)[1].lstrip()
    table = text.split("\n\n", 1)[0]  # the section's first table
    rows = {cells[1].strip("` "): cells[2].strip() for line in table.splitlines() if line.startswith("| `")
            for cells in [line.split("|")]}
    assert rows == {name: s.flow for name, s in SCENARIOS.items()}, "docs/compare.md's scenario table"


def test_stream_override_and_scenario_shapes():
    assert all(r.stream for r in plan_requests(SCENARIOS["chat"], 4, stream=True))
    assert not any(r.stream for r in plan_requests(SCENARIOS["stream"], 4, stream=False))
    assert SCENARIOS["multimodal"].flow == "epd" and SCENARIOS["pd"].flow == "pd"
    long_body = len(str(plan_requests(SCENARIOS["long-prompt"], 1)[0].body))
    assert long_body > 10_000
    with pytest.raises(ValueError):
        plan_requests(SCENARIOS["chat"], -1)


# -- error kinds ----------------------------------------------------------------------------------------

def _result(status=200, error=None, tokens=(), events=(), body=None):
    return ClientResult(trace_id="t", status=status, headers={}, body=body, tokens=list(tokens), events=list(events),
                        error=error)


@pytest.mark.parametrize("result, stream, kind", [
    # what the client saw                                                        streamed?  kind
    (_result(body={"choices": [{"message": {"content": "hi"}}]}), False, None),
    (_result(tokens=["a"], events=[{}, {"done": True}]), True, None),
    (_result(tokens=["a"], events=[{}]), True, "stream_incomplete"),
    (_result(status=503, body={"error": {}}), False, "http_503"),
    (_result(status=0, error="ReadTimeout: read timed out"), False, "timeout"),
    (_result(status=0, error="ConnectionError: refused"), False, "connection"),
    (_result(error="ChunkedEncodingError: Response ended prematurely"), True, "stream_broken"),
    (_result(error="bad SSE payload: b'x'"), True, "bad_sse"),
    (_result(error="SSLError: nope"), False, "client_error"),
    (_result(body={"choices": [{"message": {"content": ""}}]}), False, "empty_answer"),
])
def test_classify_names_the_kind_of_failure(result, stream, kind):
    assert classify(result, stream) == kind


# -- driver -----------------------------------------------------------------------------------------------

class FakeClient:
    """Answers after ``delay_s``; records how many requests were in flight at once."""

    def __init__(self, delay_s=0.02, fail_every=0, raise_on=None):
        self.delay_s, self.fail_every, self.raise_on = delay_s, fail_every, raise_on
        self.in_flight = self.max_in_flight = self.calls = 0
        self.lock = threading.Lock()

    def chat(self, body, timeout_s=None):
        with self.lock:
            self.calls += 1
            n = self.calls
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.raise_on == n:
                raise RuntimeError("boom")
            time.sleep(self.delay_s)
            r = ClientResult(trace_id=f"{n:032x}", status=200, headers={"x-inference-pod": "vllm-0"},
                             body={"choices": [{"message": {"content": "ok"}}], "usage": {"completion_tokens": 3}},
                             started_s=0.0, finished_s=self.delay_s)
            if self.fail_every and n % self.fail_every == 0:
                r.status, r.body = 503, {"error": {"message": "no endpoint"}}
            return r
        finally:
            with self.lock:
                self.in_flight -= 1


def test_driver_sends_every_request_with_bounded_concurrency_and_reports_progress():
    client = FakeClient(delay_s=0.03, fail_every=4)
    seen = []
    driver = Driver(client, Load(concurrency=3), on_progress=lambda d, t, e, s: seen.append((d, t, e)))
    result = driver.run(plan_requests(SCENARIOS["chat"], 12))
    assert len(result.samples) == 12 and result.stopped is None
    assert [s.index for s in result.samples] == list(range(12))
    assert client.max_in_flight <= 3
    assert result.errors() == {"http_503": 3}
    assert len(result.ok) == 9 and all(s.tokens == 3 and s.pod == "vllm-0" for s in result.ok)
    assert seen[0] == (0, 12, 0) and seen[-1] == (12, 12, 3)


def test_driver_keeps_to_the_rate():
    client = FakeClient(delay_s=0.0)
    started = time.monotonic()
    result = Driver(client, Load(concurrency=8, rate=20)).run(plan_requests(SCENARIOS["chat"], 5))
    # request i leaves at i/rate: the last one 0.2 s after the first
    assert time.monotonic() - started >= 0.19
    assert all(s.sent_s >= s.index / 20 - 0.005 for s in result.samples)


def test_driver_stops_dispatching_at_max_duration():
    client = FakeClient(delay_s=0.2)
    started = time.monotonic()
    result = Driver(client, Load(concurrency=1, max_duration_s=0.5)).run(plan_requests(SCENARIOS["chat"], 50))
    assert 1 <= len(result.samples) < 50
    assert "max duration" in result.stopped
    assert time.monotonic() - started < 2.0


def test_a_client_exception_is_counted_not_raised():
    result = Driver(FakeClient(raise_on=2), Load(concurrency=2)).run(plan_requests(SCENARIOS["chat"], 3))
    assert result.errors() == {"client_error": 1}
    assert "boom" in next(s.detail for s in result.samples if s.error)


@pytest.mark.parametrize("kwargs", [{"concurrency": 0}, {"rate": -1}, {"max_duration_s": 0}])
def test_driver_refuses_unbounded_or_nonsense_settings(kwargs):
    with pytest.raises(ValueError):
        Driver(FakeClient(), Load(**kwargs))


def test_the_driver_sends_requests_in_the_protocols_given_in_turn():
    class Recording(FakeClient):
        def chat(self, body, timeout_s=None, protocol="http/1.1"):
            with self.lock:
                seen[body["seed"]] = protocol
            return super().chat(body, timeout_s)

    seen = {}
    plan = plan_requests(SCENARIOS["chat"], 6)
    result = Driver(Recording(delay_s=0.0), Load(concurrency=2), protocols=("http/1.1", "h2c")).run(plan)
    assert len(result.ok) == 6
    assert [seen[r.body["seed"]] for r in plan] == ["http/1.1", "h2c"] * 3


def test_the_driver_sends_no_more_once_halted_and_says_why():
    def progress(done, total, errors, elapsed):
        if done >= 3:
            driver.halt("enough")

    driver = Driver(FakeClient(delay_s=0.01), Load(concurrency=1), on_progress=progress)
    result = driver.run(plan_requests(SCENARIOS["chat"], 20))
    assert len(result.samples) < 20 and result.stopped.startswith("enough: stopped after ")
