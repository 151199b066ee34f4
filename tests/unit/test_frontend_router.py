"""The frontend's preprocessing (mock tokenizer) and KV-aware router."""

import pytest

from eppkit.services.epp.pool import Pool, parse_endpoints
from eppkit.services.frontend.router import KvRouter, NoWorker, block_hashes
from eppkit.services.frontend.tokenizer import tokenize
from eppkit.services.vllm.tokens import count_tokens, prompt_text_of

pytestmark = pytest.mark.unit

SYSTEM = "You are a helpful assistant who answers every question with care and detail, citing sources."


def chat(user: str) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]}


def test_token_count_matches_what_the_mock_vllm_counts():
    body = chat("What is the capital of France?")
    tokenized = tokenize(body)
    assert tokenized.count == count_tokens(prompt_text_of(body))
    assert tokenize(body).token_ids == tokenized.token_ids  # deterministic
    assert all(0 <= t < 32000 for t in tokenized.token_ids)


def test_block_hashes_cover_full_blocks_and_chain():
    toks = [str(i) for i in range(10)]
    assert len(block_hashes(toks, 4)) == 2
    other = ["x"] + toks[1:]
    assert block_hashes(other, 4)[1] != block_hashes(toks, 4)[1]


def test_shared_prefix_goes_back_to_the_same_worker():
    pool = Pool(parse_endpoints("w0=127.0.0.1:1,w1=127.0.0.1:2,w2=127.0.0.1:3"))
    router = KvRouter(pool, block_size=4)
    first = router.route(tokenize(chat("first question")).tokens, "m")
    assert first.overlap_blocks == 0
    second = router.route(tokenize(chat("second question")).tokens, "m")
    assert second.worker is first.worker
    assert second.overlap_blocks >= 3
    assert second.worker_id == first.worker.name
    assert "overlap" in second.reason


def test_load_outweighs_a_small_overlap():
    pool = Pool(parse_endpoints("w0=127.0.0.1:1,w1=127.0.0.1:2"))
    router = KvRouter(pool, block_size=4, load_weight=1.0)
    first = router.route(tokenize(chat("q")).tokens, "m")
    busy = first.worker
    pool.record_scrape(busy, {"vllm:num_requests_waiting": 20, "vllm:num_requests_running": 8})
    again = router.route(tokenize(chat("q2")).tokens, "m")
    assert again.worker is not busy


def test_only_workers_serving_the_model_and_up_are_considered():
    pool = Pool(parse_endpoints("w0=127.0.0.1:1@a,w1=127.0.0.1:2@b"))
    router = KvRouter(pool)
    assert router.route(["x"], "b").worker.name == "w1"
    pool.record_scrape(pool.endpoints[1], None, error="refused")
    with pytest.raises(NoWorker, match="refused"):
        router.route(["x"], "b")


def test_empty_pool_has_no_worker():
    with pytest.raises(NoWorker, match="empty"):
        KvRouter(Pool([])).route(["x"])
