"""The callout's pool parsing and scorers, without HTTP."""

import pytest

from eppkit.services.callout.scorers import PoolEndpoint, PrefixCache, RoundRobin, make_scorer, parse_endpoints, prompt_text

pytestmark = pytest.mark.unit

A = PoolEndpoint("127.0.0.1:8001", "vllm-0")
B = PoolEndpoint("127.0.0.1:8002", "vllm-1")
C = PoolEndpoint("127.0.0.1:8003", "vllm-2")


@pytest.mark.parametrize(
    "spec, expected",
    [
        # name and model given
        ("127.0.0.1:8001=vllm-0@llama", [PoolEndpoint("127.0.0.1:8001", "vllm-0", "llama")]),
        # no name: the address names it; no model: serves any model
        ("127.0.0.1:8001", [PoolEndpoint("127.0.0.1:8001", "127.0.0.1:8001")]),
        # blanks and empty items are ignored; model names may hold slashes
        (" 127.0.0.1:1=a , ,[::1]:2=b@org/model-7b ", [PoolEndpoint("127.0.0.1:1", "a"), PoolEndpoint("[::1]:2", "b", "org/model-7b")]),
        # the empty pool is allowed (every pick is then a 503)
        ("", []),
    ],
)
def test_parse_endpoints_reads_address_name_and_model(spec, expected):
    assert parse_endpoints(spec) == expected


@pytest.mark.parametrize("spec", ["127.0.0.1", "127.0.0.1:http=a", ":8000=a", "127.0.0.1:0", "127.0.0.1:1,127.0.0.1:1"])
def test_parse_endpoints_rejects_bad_or_duplicate_addresses(spec):
    with pytest.raises(ValueError):
        parse_endpoints(spec)


def test_round_robin_takes_each_candidate_in_turn():
    scorer = RoundRobin()
    picks = [scorer.pick([A, B, C], {})[0] for _ in range(6)]
    assert picks == [A, B, C, A, B, C]
    assert scorer.pick([A], {}) == (A, "round-robin")


def test_round_robin_counts_each_candidate_set_on_its_own():
    scorer = RoundRobin()
    picks = [scorer.pick(pool, {})[0] for pool in ([A, B], [C], [A, B], [C], [A, B])]
    assert picks == [A, C, B, C, A]


def test_prompt_text_joins_chat_messages_and_completion_prompts():
    chat = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]}]}
    assert prompt_text(chat) == "system\nbe brief\nuser\nhi"
    assert prompt_text({"prompt": "once upon"}) == "once upon"
    assert prompt_text({"prompt": ["a", "b"]}) == "a\nb"
    assert prompt_text({"messages": "not a list"}) == ""


def chat(text: str, model: str = "m") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


def test_prefix_cache_sends_a_shared_prefix_back_to_the_same_endpoint():
    scorer = PrefixCache(block_chars=8)
    shared = "You are a helpful assistant. " * 4
    first, reason = scorer.pick([A, B, C], chat(shared + "question one"))
    assert reason.startswith("prefix-miss")
    # Misses spread round-robin, so a different prompt lands elsewhere...
    other, _ = scorer.pick([A, B, C], chat("completely different text here"))
    assert other != first
    # ...and a prompt sharing the long prefix goes back to the first endpoint.
    again, reason = scorer.pick([A, B, C], chat(shared + "question two"))
    assert again == first
    assert reason.startswith("prefix-hit")


def prompt(text: str, model: str = "m") -> dict:
    return {"model": model, "prompt": text}


def test_prefix_cache_prefers_the_longest_shared_prefix():
    scorer = PrefixCache(block_chars=4)
    scorer.pick([A], prompt("aaaabbbb"))  # A is sent blocks 1-2
    scorer.pick([B], prompt("aaaabbbbccccdddd"))  # B is sent blocks 1-4
    scorer.pick([A], prompt("aaaabbbbcccc"))  # A is sent blocks 1-3; B still holds block 4
    assert scorer.pick([A, B], prompt("aaaabbbbcccc")) == (A, "prefix-hit 3/3 blocks")
    assert scorer.pick([A, B], prompt("aaaabbbbccccddddeeee")) == (B, "prefix-hit 4/5 blocks")


def test_prefix_cache_ignores_endpoints_that_are_not_candidates_and_other_models():
    scorer = PrefixCache(block_chars=4)
    scorer.pick([A], prompt("aaaabbbbcccc"))
    endpoint, reason = scorer.pick([B, C], prompt("aaaabbbbcccc"))
    assert endpoint in (B, C) and reason.startswith("prefix-miss")
    # The model seeds the hash chain: the same text for another model shares nothing.
    assert scorer.pick([A, B, C], prompt("aaaabbbbcccc", model="other"))[1].startswith("prefix-miss")


def test_prefix_cache_forgets_the_oldest_blocks_beyond_capacity():
    scorer = PrefixCache(block_chars=4, capacity=2)
    scorer.pick([A], prompt("aaaabbbbcccc"))  # 3 blocks; the first is forgotten, the last two kept
    assert scorer.pick([A, B], prompt("aaaabbbbcccc")) == (A, "prefix-hit 3/3 blocks")
    assert scorer.pick([A, B], prompt("aaaa"))[1].startswith("prefix-miss")


def test_make_scorer_names_the_choices_on_a_typo():
    assert make_scorer("prefix-cache").name == "prefix-cache"
    with pytest.raises(ValueError, match="round-robin"):
        make_scorer("least-queue")
