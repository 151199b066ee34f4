"""The scorer registry and every registered scorer, without a transport."""

import json

import pytest
from eppkit.services.openai_server.tokens import count_tokens, prompt_text_of
from eppkit.services.picker import scorers
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.request import LlmRequest, parse_request
from eppkit.services.picker.scorers.kv_router import block_hashes
from eppkit.services.picker.scorers.prefix_cache import PrefixIndex
from eppkit.services.picker.tokenizer import tokenize

pytestmark = pytest.mark.unit


def pool_of(n: int) -> Pool:
    return Pool(parse_endpoints(",".join(f"e{i}=127.0.0.1:{9000 + i}" for i in range(n))))


def req(prompt: str = "", model: str = "m") -> LlmRequest:
    return LlmRequest(headers={}, model=model, prompt=prompt)


def chat(user: str, system: str = "You are a helpful assistant who answers every question with care.") -> LlmRequest:
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    return parse_request({}, json.dumps(body).encode())


# --- registry -------------------------------------------------------------------------------------

def test_every_scorer_module_registers_its_type():
    assert set(scorers.types()) >= {"round-robin", "queue-scorer", "prefix-cache-scorer", "kv-router-scorer"}
    for type_name in scorers.types():
        scorer = scorers.create(type_name)
        assert (scorer.type, scorer.name) == (type_name, type_name)
        pick = scorer.pick(chat("hello"), pool_of(2).endpoints)
        assert pick.endpoint.name in ("e0", "e1") and pick.reason


def test_create_names_the_known_types_and_the_valid_parameters():
    with pytest.raises(ValueError, match="unknown scorer .least-queue.; choose one of .*queue-scorer"):
        scorers.create("least-queue")
    with pytest.raises(ValueError, match="unknown parameter.*blockSize.*valid: hashBlockSize, lruCapacity"):
        scorers.create("prefix-cache-scorer", {"blockSize": 8})
    with pytest.raises(ValueError, match="parameter hashBlockSize must be int, got .8."):
        scorers.create("prefix-cache-scorer", {"hashBlockSize": "8"})
    with pytest.raises(ValueError, match="takes no parameters, got x"):
        scorers.create("round-robin", {"x": 1})
    assert scorers.create("queue-scorer", name="decoders").name == "decoders"


def test_register_refuses_a_second_scorer_for_a_type():
    with pytest.raises(ValueError, match="registered twice"):
        scorers.register("queue-scorer")(type("Other", (), {}))


# --- round-robin ----------------------------------------------------------------------------------

def test_round_robin_rotates_and_lists_the_rest_as_fallbacks():
    pool = pool_of(3)
    rr = scorers.create("round-robin")
    picks = [rr.pick(req(), pool.endpoints) for _ in range(4)]
    assert [p.endpoint.name for p in picks] == ["e0", "e1", "e2", "e0"]
    assert [ep.name for ep in picks[1].fallbacks] == ["e2", "e0"]
    assert picks[1].reason == "round-robin turn 1 -> 2 of 3"


def test_round_robin_counts_each_candidate_set_on_its_own():
    a, b, c = pool_of(3).endpoints
    rr = scorers.create("round-robin")
    picks = [rr.pick(req(), cands).endpoint for cands in ([a, b], [c], [a, b], [c], [a, b])]
    assert picks == [a, c, b, c, a]


# --- queue-scorer ---------------------------------------------------------------------------------

def test_queue_scorer_prefers_short_waiting_queue_over_running():
    pool = pool_of(3)
    e0, e1, e2 = pool.endpoints
    pool.record_scrape(e0, {"vllm:num_requests_waiting": 2, "vllm:num_requests_running": 0})
    pool.record_scrape(e1, {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 3})
    pool.record_scrape(e2, {"vllm:num_requests_waiting": 1, "vllm:num_requests_running": 3})
    pick = scorers.create("queue-scorer").pick(req(), pool.endpoints)
    assert pick.endpoint is e1
    assert [ep.name for ep in pick.fallbacks] == ["e0", "e2"]  # cost 4, then 5
    assert "waiting=0 running=3" in pick.reason


def test_queue_scorer_counts_picks_since_the_last_scrape_and_spreads_ties():
    pool = pool_of(2)
    qs = scorers.create("queue-scorer")
    first = qs.pick(req(), pool.endpoints).endpoint
    pool.note_pick(first)
    assert qs.pick(req(), pool.endpoints).endpoint is not first
    fresh = scorers.create("queue-scorer")
    assert {fresh.pick(req(), pool_of(2).endpoints).endpoint.name for _ in range(2)} == {"e0", "e1"}


def test_queue_scorer_spreads_each_pools_ties_when_pools_take_turns():
    # Two models' pools asked in turn, every load equal (as right after a metrics scrape): each pool's ties rotate
    # over its own pods. One turn counter over every pool sent pool a's ties to a0 every time.
    a, b = parse_endpoints("a0=127.0.0.1:1,a1=127.0.0.1:2"), parse_endpoints("b0=127.0.0.1:3")
    qs = scorers.create("queue-scorer")
    picked_a = []
    for _ in range(4):
        picked_a.append(qs.pick(req(), a).endpoint.name)
        qs.pick(req(), b)
    assert picked_a == ["a0", "a1", "a0", "a1"]


# --- prefix-cache-scorer --------------------------------------------------------------------------

def test_prefix_hashes_are_chained_over_full_blocks():
    idx = PrefixIndex(block_size=4)
    a = idx.hashes("m", "aaaabbbbcc")
    assert len(a) == 2  # the partial block "cc" has no hash
    assert a == idx.hashes("m", "aaaabbbbdd")  # differ only in the partial block
    assert idx.hashes("m", "xaaabbbb")[1] != a[1]  # same second block, different first: the chain differs
    assert idx.hashes("other-model", "aaaabbbb") != a


def test_prefix_cache_sticks_to_the_endpoint_that_saw_the_prefix():
    pool = pool_of(3)
    scorer = scorers.create("prefix-cache-scorer", {"hashBlockSize": 8})
    system = "You are a careful assistant. " * 4
    first = scorer.pick(req(system + "question one"), pool.endpoints)
    assert "no cached prefix" in first.reason
    pool.note_pick(first.endpoint)  # affinity wins over a slightly shorter queue
    again = scorer.pick(req(system + "question two"), pool.endpoints)
    assert again.endpoint is first.endpoint
    assert again.reason.startswith("prefix hit") and "of 8 chars" in again.reason


def test_prefix_cache_prefers_the_longest_shared_prefix_among_candidates():
    a, b, c = pool_of(3).endpoints
    scorer = scorers.create("prefix-cache-scorer", {"hashBlockSize": 4})
    scorer.pick(req("aaaabbbb"), [a])  # a holds blocks 1-2
    scorer.pick(req("aaaabbbbccccdddd"), [b])  # b holds blocks 1-4
    scorer.pick(req("aaaabbbbcccc"), [a])  # a holds 1-3; b still holds block 4
    assert scorer.pick(req("aaaabbbbccccddddeeee"), [a, b]).endpoint is b
    miss = scorer.pick(req("aaaabbbbcccc"), [c])
    assert miss.endpoint is c and miss.reason.startswith("no cached prefix")


def test_prefix_cache_sends_a_cold_prompt_to_the_least_loaded():
    pool = pool_of(2)
    e0, e1 = pool.endpoints
    pool.record_scrape(e0, {"vllm:num_requests_waiting": 3, "vllm:num_requests_running": 1})
    pool.record_scrape(e1, {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 0})
    pick = scorers.create("prefix-cache-scorer", {"hashBlockSize": 8}).pick(req("a brand new prompt"), pool.endpoints)
    assert pick.endpoint is e1


def test_prefix_index_forgets_least_recently_used_blocks():
    idx = PrefixIndex(block_size=1, capacity=3)
    idx.record(idx.hashes(None, "abcd"), "x")
    assert len(idx) == 3
    assert idx.match_length(idx.hashes(None, "abcd"), "x") == 0  # the first block was evicted


def test_chat_prompts_sharing_a_system_prompt_share_a_prefix():
    r = parse_request({}, b'{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}')
    assert r.prompt.startswith("<|system|>S<|user|>U")


# --- kv-router-scorer -----------------------------------------------------------------------------

def test_token_count_matches_what_the_mock_vllm_counts():
    body = {"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    tokenized = tokenize(body)
    assert tokenized.count == count_tokens(prompt_text_of(body))
    assert tokenize(body).token_ids == tokenized.token_ids  # deterministic
    assert all(0 <= t < 32000 for t in tokenized.token_ids)


def test_kv_block_hashes_cover_full_blocks_and_chain():
    toks = [str(i) for i in range(10)]
    assert len(block_hashes(toks, 4)) == 2
    assert block_hashes(["x"] + toks[1:], 4)[1] != block_hashes(toks, 4)[1]


def test_kv_router_sends_a_shared_prefix_back_to_the_same_worker():
    pool = pool_of(3)
    router = scorers.create("kv-router-scorer", {"blockSize": 4})
    first = router.pick(chat("first question"), pool.endpoints)
    assert first.details["overlap_blocks"] == 0
    pool.note_pick(first.endpoint)
    second = router.pick(chat("second question"), pool.endpoints)
    assert second.endpoint is first.endpoint
    assert second.details["overlap_blocks"] >= 3 and "overlap" in second.reason


def test_kv_router_load_outweighs_a_small_overlap():
    pool = pool_of(2)
    router = scorers.create("kv-router-scorer", {"blockSize": 4, "loadWeight": 1.0})
    busy = router.pick(chat("q"), pool.endpoints).endpoint
    pool.record_scrape(busy, {"vllm:num_requests_waiting": 20, "vllm:num_requests_running": 8})
    assert router.pick(chat("q2"), pool.endpoints).endpoint is not busy


@pytest.mark.parametrize("kind", ["kv-router-scorer", "kv-events-scorer"])
def test_a_block_size_of_zero_is_refused_as_the_parameters_are_read(kind):
    with pytest.raises(ValueError, match=f"{kind}: blockSize must be positive"):
        scorers.create(kind, {"blockSize": 0})
