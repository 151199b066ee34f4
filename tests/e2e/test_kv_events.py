"""KV-cache events end to end: the mocks publish what their prefix caches hold (vLLM's ZeroMQ events), the kit's EPP
with ``kv-events-scorer`` routes by them, and the mocks' own counters say whether requests landed where their
blocks are.

The workload: four conversations, each a long system prompt of its own (a dozen blocks) and six questions, sent one
at a time and interleaved (g0 q0, g1 q0, g2 q0, g3 q0, g0 q1, ...), to three pods. Round robin sends each
conversation to every pod in turn, so each pod prefills each system prompt once: half the prompts' leading blocks
miss. A picker that knows where the blocks are sends each conversation back to the pod that holds it: only its
first request misses.
"""

import pytest
import requests

from eppkit.services.picker.scraper import parse_metrics
from eppkit.topology import Topology, VllmSpec
from eppkit.services.vllm.config import MockLatency
from tests.support.reliability import require_gaie_epp

pytestmark = pytest.mark.e2e

GROUPS, QUESTIONS = 4, 6
WORDS = ("gateway", "endpoint", "picker", "cache", "prefill", "decode", "token", "block", "route", "pool", "envoy")


def system_prompt(group: int) -> str:
    # ~200 tokens, different from the first word on: its blocks are its own.
    return " ".join(f"{WORDS[(group * 7 + i) % len(WORDS)]}{group}" for i in range(200))


def bodies() -> list[dict]:
    return [{"model": "mock-llm", "max_tokens": 2,
             "messages": [{"role": "system", "content": system_prompt(g)},
                          {"role": "user", "content": f"question {q} of conversation {g}?"}]}
            for q in range(QUESTIONS) for g in range(GROUPS)]


def hit_rate(bed) -> tuple[float, dict]:
    """Prompt tokens the pods' prefix caches held over those they were asked about, from their /metrics."""
    hits = queries = 0.0
    for ep in bed.backends:
        metrics = parse_metrics(requests.get(f"http://{ep.address}/metrics", timeout=5).text)
        hits += metrics.get("vllm:prefix_cache_hits_total", 0.0)
        queries += metrics.get("vllm:prefix_cache_queries_total", 0.0)
    return hits / queries, {"hits": hits, "queries": queries}


def run(eppkit_testbed_factory, scorer: str | None, mode: str = "ext_proc") -> tuple[float, dict, list[str]]:
    bed = eppkit_testbed_factory(Topology(mode=mode, vllm=[VllmSpec(f"vllm-{i}") for i in range(3)],
                                          latency=MockLatency(time_to_first_token=5, inter_token_latency=1),
                                          options={"scorer": scorer} if scorer else {}, kv_events=True))
    client = bed.client()
    served = []
    for body in bodies():
        result = client.chat(body)
        assert result.status == 200, result.body
        served.append(bed.served_pod(result.headers))
    client.flush()
    rate, counts = hit_rate(bed)
    return rate, counts, served


def test_the_kv_events_scorer_sends_shared_prefixes_where_their_blocks_are(eppkit_testbed_factory, record_property):
    kv_rate, kv_counts, kv_served = run(eppkit_testbed_factory, "kv-events-scorer")
    rr_rate, rr_counts, _ = run(eppkit_testbed_factory, "round-robin")
    record_property("kv_events_hit_rate", round(kv_rate, 3))
    record_property("round_robin_hit_rate", round(rr_rate, 3))
    print(f"\nprefix-cache hit rate: kv-events-scorer {kv_rate:.2f} {kv_counts}, round-robin {rr_rate:.2f} {rr_counts}")
    # Each conversation stays on one pod once its first request stored its blocks there.
    by_group = {g: {kv_served[q * GROUPS + g] for q in range(1, QUESTIONS)} for g in range(GROUPS)}
    assert all(len(pods) == 1 for pods in by_group.values()), by_group
    assert {kv_served[g] for g in range(GROUPS)} == {"vllm-0", "vllm-1", "vllm-2"}, kv_served[:GROUPS]
    # The pods' own counters: only each conversation's first request missed (5 of 6 hit), against half for round
    # robin (each pod prefilled each system prompt once).
    assert kv_rate > 0.75 and rr_rate < 0.55, (kv_counts, rr_counts)


def test_a_pod_whose_cache_is_reset_loses_its_traffic_advantage(eppkit_testbed_factory):
    # POST /reset_prefix_cache on a pod: it publishes AllBlocksCleared, and the scorer no longer sends that pod's
    # conversations back to it for their blocks (it picks by load again, and the blocks are stored anew).
    bed = eppkit_testbed_factory(Topology(mode="ext_proc", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")],
                                          latency=MockLatency(time_to_first_token=5, inter_token_latency=1),
                                          options={"scorer": "kv-events-scorer"}))
    client = bed.client()
    body = bodies()[0]
    first = client.chat(body)
    holder = bed.served_pod(first.headers)
    assert [bed.served_pod(client.chat(body).headers) for _ in range(3)] == [holder] * 3
    address = next(ep.address for ep in bed.backends if ep.name == holder)
    requests.post(f"http://{address}/reset_prefix_cache", timeout=5).raise_for_status()
    import time

    time.sleep(0.3)  # the event's way to the EPP
    after = client.chat(body)
    client.flush()
    trace = bed.jaeger.wait_for_trace(after.trace_id, ["epp.pick"])
    reason = next(s for s in trace.spans if s.name == "epp.pick").attributes["epp.reason"]
    assert reason.startswith("no pod holds this prompt's first block"), reason


@pytest.mark.eppkit_prepare("gaie-epp")
def test_gaies_epp_on_the_same_conversations_reports_its_hit_rate(eppkit_testbed_factory, record_property):
    # GAIE's EPP v1.5.0 with its built-in plugins (an approximate prefix scorer: it remembers what it routed, not what
    # the pods hold): its rate is reported, not judged; the pods publish their events all the same.
    require_gaie_epp()
    rate, counts, served = run(eppkit_testbed_factory, None, mode="gaie-epp")
    record_property("gaie_epp_hit_rate", round(rate, 3))
    print(f"\nGAIE's EPP v1.5.0: prefix-cache hit rate {rate:.0%} ({counts}); served {served}")
    assert len(served) == GROUPS * QUESTIONS and counts["queries"] > 0
