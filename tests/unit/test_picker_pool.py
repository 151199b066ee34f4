"""The picker core's pool: the one endpoint syntax, reading vLLM /metrics, health and load bookkeeping."""

import asyncio
import contextlib
import socket

import aiohttp
import pytest
from aiohttp import web
from eppkit.services.picker.endpoints import format_endpoints, parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.scraper import MetricsScraper, parse_metrics

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "spec, expected",
    [
        # (spec, [(name, address, models)])
        ("vllm-0=127.0.0.1:8001", [("vllm-0", "127.0.0.1:8001", ())]),
        ("127.0.0.1:8001", [("127.0.0.1:8001", "127.0.0.1:8001", ())]),  # bare address: address is the name
        ("a=127.0.0.1:1@m1, b=127.0.0.1:2@m1|m2", [("a", "127.0.0.1:1", ("m1",)), ("b", "127.0.0.1:2", ("m1", "m2"))]),
        ("", []),  # empty pool is allowed: every request then gets 503
        ("a=127.0.0.1:1,,", [("a", "127.0.0.1:1", ())]),  # stray commas ignored
        ("b=[::1]:2@org/model-7b", [("b", "[::1]:2", ("org/model-7b",))]),  # IPv6 in brackets; slashes in models
    ],
)
def test_parse_endpoints_accepts_names_addresses_and_models(spec, expected):
    got = [(ep.name, ep.address, ep.models) for ep in parse_endpoints(spec)]
    assert got == expected


@pytest.mark.parametrize("spec", ["vllm-0", "a=host", "a=:80", "a=h:port", "a=127.0.0.1:0", "a=127.0.0.1:70000",
                                  "a=127.0.0.1:1,b=127.0.0.1:1"])
def test_parse_endpoints_rejects_bad_items_and_duplicates(spec):
    with pytest.raises(ValueError):
        parse_endpoints(spec)


def test_format_endpoints_writes_what_parse_endpoints_reads():
    pool = parse_endpoints("a=127.0.0.1:1@m1|m2,b=[::1]:2")
    assert format_endpoints(pool) == "a=127.0.0.1:1,b=[::1]:2"
    again = parse_endpoints(format_endpoints(pool, models=True))
    assert [(ep.name, ep.address, ep.models) for ep in again] == [("a", "127.0.0.1:1", ("m1", "m2")),
                                                                   ("b", "[::1]:2", ())]


def test_parse_metrics_sums_label_sets_and_skips_comments():
    text = (
        "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="a"} 2.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="a"} 1.0\n'
        "vllm:num_requests_running 3\n"
        "vllm:kv_cache_usage_perc NaN\n"
    )
    m = parse_metrics(text)
    assert m["vllm:num_requests_waiting"] == 3.0
    assert m["vllm:num_requests_running"] == 3.0
    assert "vllm:kv_cache_usage_perc" not in m


def test_parse_metrics_reads_the_mock_vllms_own_exposition():
    from eppkit.services.openai_server.metrics import VllmMetrics

    metrics = VllmMetrics("mock-llm", running=lambda: 2, waiting=lambda: 5, kv_usage=lambda: 0.25)
    metrics.request_success(finished_reason="length").inc()
    m = parse_metrics(metrics.render().decode())
    assert (m["vllm:num_requests_running"], m["vllm:num_requests_waiting"], m["vllm:kv_cache_usage_perc"]) == (2, 5, 0.25)
    assert m["vllm:request_success_total"] == 1


def test_parse_metrics_reads_only_the_samples_asked_for():
    text = ("# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0"} 2\n'
            "vllm:num_requests_waiting_other 7\n"
            "vllm:num_requests_running\t3\n"
            "some histogram garbage {\n")
    only = frozenset({"vllm:num_requests_waiting", "vllm:num_requests_running"})
    assert parse_metrics(text, only) == {"vllm:num_requests_waiting": 2.0, "vllm:num_requests_running": 3.0}
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_waiting {not a sample\n", only)


def test_parse_metrics_refuses_a_malformed_exposition():
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_waiting 1\ngarbage line\n")


def test_scrape_error_marks_down_and_success_brings_back_and_resets_recent_picks():
    pool = Pool(parse_endpoints("a=127.0.0.1:1,b=127.0.0.1:2"))
    a, b = pool.endpoints
    pool.note_pick(a)
    pool.note_pick(a)
    assert a.queue_depth == 2

    pool.record_scrape(b, None, error="refused")
    assert [ep.name for ep in pool.healthy()] == ["a"]
    assert b.last_error == "refused"

    pool.record_scrape(a, {"vllm:num_requests_waiting": 1, "vllm:num_requests_running": 4})
    pool.record_scrape(b, None)  # answered, but without metrics (404)
    assert [ep.name for ep in pool.healthy()] == ["a", "b"]
    assert (a.waiting, a.running, a.picked_since_scrape, a.queue_depth) == (1, 4, 0, 5)
    assert b.waiting is None and "no metrics" in b.describe_load()


def test_find_by_name_or_address():
    pool = Pool(parse_endpoints("a=127.0.0.1:1,b=127.0.0.1:2"))
    assert pool.find("b").address == "127.0.0.1:2"
    assert pool.find(" 127.0.0.1:1 ").name == "a"
    assert pool.find("c") is None


def test_endpoint_without_models_serves_every_model():
    a, b = parse_endpoints("a=127.0.0.1:1,b=127.0.0.1:2@m1")
    assert a.serves("anything") and a.serves(None)
    assert b.serves("m1") and not b.serves("m2") and b.serves(None)


async def _scrape_once(pool: Pool, timeout_s: float) -> None:
    """One scrape of every endpoint, as the scraper's loop does it, without the loop."""
    scraper = MetricsScraper(pool, interval_s=0, timeout_s=timeout_s)
    scraper._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))
    try:
        await scraper.scrape_once()
    finally:
        await scraper.stop()


@contextlib.asynccontextmanager
async def _metrics_server(handler):
    """A /metrics endpoint on a free 127.0.0.1 port; yields the port."""
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


def test_a_slow_metrics_answer_keeps_the_endpoint_up_and_a_refused_one_marks_it_down():
    # One scrape slower than the timeout (a busy endpoint, or the EPP's own loop busy with a
    # large body) must not take the endpoint out of the pool; a refused connection does.
    async def slow_metrics(request):
        await asyncio.sleep(0.5)
        return web.Response(text="vllm:num_requests_waiting 0\n")

    async def go():
        async with _metrics_server(slow_metrics) as slow_port:
            with socket.socket() as s:  # a port nobody listens on
                s.bind(("127.0.0.1", 0))
                dead_port = s.getsockname()[1]
            pool = Pool(parse_endpoints(f"slow=127.0.0.1:{slow_port},dead=127.0.0.1:{dead_port}"))
            await _scrape_once(pool, timeout_s=0.1)
        return pool

    slow, dead = asyncio.run(go()).endpoints
    assert slow.healthy and "health unchanged" in slow.last_error
    assert not dead.healthy


def test_a_malformed_metrics_answer_keeps_the_endpoint_up_and_its_last_figures():
    async def garbled_metrics(request):
        return web.Response(text="vllm:num_requests_waiting {not a sample\n")

    async def go():
        async with _metrics_server(garbled_metrics) as port:
            pool = Pool(parse_endpoints(f"garbled=127.0.0.1:{port}"))
            pool.record_scrape(pool.endpoints[0], {"vllm:num_requests_waiting": 3, "vllm:num_requests_running": 1})
            await _scrape_once(pool, timeout_s=1.0)
        return pool.endpoints[0]

    ep = asyncio.run(go())
    assert ep.healthy and (ep.waiting, ep.running) == (3, 1)
    assert "malformed metrics" in ep.last_error


def test_a_scrape_asks_for_the_samples_it_reads_and_reads_a_whole_exposition_that_ignores_the_ask():
    # The mock's /metrics (and vLLM's: prometheus_client's exposition) serves ?name[]= samples only: three gauges'
    # lines instead of 45 KB of histograms every 200 ms. An exposition that serves everything is read all the same.
    from eppkit.services.openai_server.metrics import NAME_PARAM, VllmMetrics

    mock = VllmMetrics("m", running=lambda: 2, waiting=lambda: 5, kv_usage=lambda: 0.5)
    asked = []

    async def filtering(request):
        asked.append(sorted(request.query.getall(NAME_PARAM, [])))
        return web.Response(body=mock.render(request.query.getall(NAME_PARAM, [])))

    async def whole(request):
        return web.Response(body=mock.render())

    async def go():
        async with _metrics_server(filtering) as a, _metrics_server(whole) as b:
            pool = Pool(parse_endpoints(f"a=127.0.0.1:{a},b=127.0.0.1:{b}"))
            await _scrape_once(pool, timeout_s=1.0)
        return pool.endpoints

    ep_a, ep_b = asyncio.run(go())
    assert asked == [["vllm:kv_cache_usage_perc", "vllm:lora_requests_info", "vllm:num_requests_running",
                      "vllm:num_requests_waiting"]]
    assert (ep_a.waiting, ep_a.running) == (ep_b.waiting, ep_b.running) == (5, 2)
    assert len(mock.render(asked[0])) < len(mock.render()) / 20
