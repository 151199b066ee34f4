"""The EPP's scorers: round-robin, least-queue and prefix-cache affinity."""

import pytest

from eppkit.services.epp.pool import Pool, parse_endpoints
from eppkit.services.epp.request import LlmRequest, parse_request
from eppkit.services.epp.scorers import LeastQueue, PrefixCache, PrefixIndex, RoundRobin, make_scorer

pytestmark = pytest.mark.unit


def pool_of(n: int) -> Pool:
    return Pool(parse_endpoints(",".join(f"e{i}=127.0.0.1:{9000 + i}" for i in range(n))))


def req(prompt: str = "", model: str = "m") -> LlmRequest:
    return LlmRequest(headers={}, model=model, prompt=prompt)


def test_round_robin_rotates_and_lists_the_rest_as_fallbacks():
    pool = pool_of(3)
    rr = RoundRobin()
    picks = [rr.pick(req(), pool.endpoints) for _ in range(4)]
    assert [p.endpoint.name for p in picks] == ["e0", "e1", "e2", "e0"]
    assert [ep.name for ep in picks[1].fallbacks] == ["e2", "e0"]
    assert "turn 1" in picks[1].reason


def test_least_queue_prefers_short_waiting_queue_over_running():
    pool = pool_of(3)
    e0, e1, e2 = pool.endpoints
    pool.record_scrape(e0, {"vllm:num_requests_waiting": 2, "vllm:num_requests_running": 0})
    pool.record_scrape(e1, {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 3})
    pool.record_scrape(e2, {"vllm:num_requests_waiting": 1, "vllm:num_requests_running": 3})
    pick = LeastQueue().pick(req(), pool.endpoints)
    assert pick.endpoint is e1
    assert [ep.name for ep in pick.fallbacks] == ["e0", "e2"]  # cost 4, then 5
    assert "waiting=0 running=3" in pick.reason


def test_least_queue_counts_picks_since_the_last_scrape():
    pool = pool_of(2)
    lq = LeastQueue()
    first = lq.pick(req(), pool.endpoints).endpoint
    pool.note_pick(first)
    second = lq.pick(req(), pool.endpoints).endpoint
    assert second is not first


def test_least_queue_spreads_ties():
    pool = pool_of(2)
    lq = LeastQueue()
    assert {lq.pick(req(), pool.endpoints).endpoint.name for _ in range(2)} == {"e0", "e1"}


def test_prefix_hashes_are_chained_over_full_blocks():
    idx = PrefixIndex(block_size=4)
    a = idx.hashes("m", "aaaabbbbcc")
    b = idx.hashes("m", "aaaabbbbdd")
    c = idx.hashes("m", "xaaabbbb")
    assert len(a) == 2  # the partial block "cc" has no hash
    assert a == b  # differ only in the partial block
    assert c[1] != a[1]  # same second block, different first: the chain differs
    assert idx.hashes("other-model", "aaaabbbb") != a


def test_prefix_cache_sticks_to_the_endpoint_that_saw_the_prefix():
    pool = pool_of(3)
    scorer = PrefixCache(block_size=8)
    system = "You are a careful assistant. " * 4
    first = scorer.pick(req(system + "question one"), pool.endpoints)
    assert "no cached prefix" in first.reason
    # Load the chosen endpoint a bit: affinity should still win over a slightly shorter queue.
    pool.note_pick(first.endpoint)
    again = scorer.pick(req(system + "question two"), pool.endpoints)
    assert again.endpoint is first.endpoint
    assert again.reason.startswith("prefix hit")


def test_prefix_cache_sends_a_cold_prompt_to_the_least_loaded():
    pool = pool_of(2)
    e0, e1 = pool.endpoints
    pool.record_scrape(e0, {"vllm:num_requests_waiting": 3, "vllm:num_requests_running": 1})
    pool.record_scrape(e1, {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 0})
    pick = PrefixCache(block_size=8).pick(req("a brand new prompt nobody has seen"), pool.endpoints)
    assert pick.endpoint is e1


def test_prefix_index_forgets_least_recently_used_blocks():
    idx = PrefixIndex(block_size=1, capacity=3)
    idx.record(idx.hashes(None, "abcd"), "x")
    assert len(idx) == 3
    assert idx.match_length(idx.hashes(None, "abcd"), "x") == 0  # the first block was evicted


def test_chat_prompts_sharing_a_system_prompt_share_a_prefix():
    body = b'{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}'
    r = parse_request({}, body)
    assert r.prompt.startswith("<|system|>S<|user|>U")


def test_make_scorer_rejects_unknown_names():
    with pytest.raises(ValueError, match="round-robin"):
        make_scorer("random")
