"""The lora-affinity scorer: a request for an adapter goes where it runs, else where there is room to load it (GAIE's
tiers), the least loaded within a tier; the scraper reads each pod's adapters from its /metrics."""

import asyncio

import pytest
from eppkit.services.openai_server.lora_info import LoraInfo
from eppkit.services.picker import scorers
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import lora_affinity
from eppkit.services.picker.scraper import MetricsScraper
from eppkit.services.vllm.testing import chat_body, in_process, make_mock

pytestmark = pytest.mark.unit


def pods(*loras: LoraInfo | None, running: tuple[float, ...] = ()):
    eps = parse_endpoints(",".join(f"p{i}=127.0.0.1:{9000 + i}" for i in range(len(loras))))
    for i, (ep, info) in enumerate(zip(eps, loras)):
        ep.lora, ep.waiting, ep.running = info, 0.0, running[i] if running else 0.0
    return eps


def pick(eps, model: str | None = "sql-lora"):
    return scorers.create("lora-affinity-scorer").pick(LlmRequest(headers={}, model=model), eps)


def test_the_pod_running_the_adapter_wins_over_a_less_loaded_one():
    eps = pods(LoraInfo(max_lora=2), LoraInfo(running=("sql-lora",), max_lora=2), running=(0, 3))
    chosen = pick(eps)
    assert chosen.endpoint.name == "p1" and chosen.reason.startswith("adapter running (sql-lora)")
    assert [ep.name for ep in chosen.fallbacks] == ["p0"]


@pytest.mark.parametrize("loras, want, words", [
    # no pod runs it: a pod with room to load it beats one where it only waits and one that is full
    ((LoraInfo(running=("a", "b"), max_lora=2), LoraInfo(running=("a",), waiting=("sql-lora",), max_lora=2),
      LoraInfo(running=("a",), max_lora=2)), "p2", "room to load the adapter"),
    # every pod full: the one where it waits beats one without it
    ((LoraInfo(running=("a", "b"), max_lora=2), LoraInfo(running=("a",), waiting=("sql-lora",), max_lora=2)),
     "p1", "adapter waiting"),
    # a pod without LoRA figures is the last resort
    ((None, LoraInfo(max_lora=1)), "p1", "room to load the adapter"),
])
def test_gaies_tiers(loras, want, words):
    chosen = pick(pods(*loras))
    assert chosen.endpoint.name == want and chosen.reason.startswith(words)


def test_within_a_tier_the_least_loaded_wins():
    eps = pods(LoraInfo(max_lora=1), LoraInfo(max_lora=1), running=(4, 1))
    assert pick(eps).endpoint.name == "p1"


def test_a_request_without_a_model_goes_by_load_alone():
    eps = pods(LoraInfo(running=("sql-lora",), max_lora=1), None, running=(3, 0))
    assert pick(eps, model=None).endpoint.name == "p1"


def test_the_scraper_reads_each_pods_adapters_from_its_metrics():
    mock, _ = make_mock(lora_modules=["sql-lora=/a", "chat-lora=/b"], max_loras=2, time_to_first_token=0,
                        inter_token_latency=200)

    async def go():
        async with in_process(mock.make_app()) as c:
            pool = Pool(parse_endpoints(f"p0=127.0.0.1:{c.port}"))
            request = asyncio.create_task(c.post("/v1/chat/completions", json=chat_body(model="sql-lora",
                                                                                       max_tokens=3)))
            await asyncio.sleep(0.1)
            scraper = MetricsScraper(pool, interval_s=60)  # its start scrapes once
            await scraper.start()
            await scraper.stop()
            await request
            return pool.endpoints[0].lora

    assert run(go()) == LoraInfo(running=("sql-lora",), max_lora=2)


def test_it_is_registered_by_gaies_type_name():
    assert lora_affinity.TYPE in scorers.types()


def run(coro):
    return asyncio.run(coro)
