"""kv-events-scorer: the pods' own KV events (real ZeroMQ publishers, the mock's) decide where a prompt goes."""

import socket
import time

import pytest

from eppkit.services.openai_server.kvevents import KvEventsConfig, ZmqPublisher
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.request import parse_request
from eppkit.services.picker.scorers import create
from eppkit.services.vllm.kvcache import PrefixCache

pytestmark = pytest.mark.unit

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "' + b" ".join(b"w%d" % i for i in range(70)) + b'"}]}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pods():
    """Two pods, each a mock prefix cache publishing its events, and the pool naming their publishers."""
    made = []
    for name in ("a", "b"):
        url = f"tcp://127.0.0.1:{free_port()}"
        publisher = ZmqPublisher(KvEventsConfig(enable_kv_cache_events=True, endpoint=url))
        made.append((name, url, publisher, PrefixCache(16, 1000, on_events=publisher.publish)))
    endpoints = parse_endpoints(",".join(f"{n}=127.0.0.1:{8000 + i}" for i, (n, *_) in enumerate(made)))
    for ep, (_, url, _, _) in zip(endpoints, made):
        ep.kv_events = url
    yield endpoints, {n: cache for n, _, _, cache in made}, {n: pub for n, _, pub, _ in made}
    for _, _, publisher, _ in made:
        publisher.close()


def until(fn, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.02)
    raise AssertionError("not within the timeout")


def test_a_prompt_goes_to_the_pod_whose_events_say_it_holds_its_blocks_until_that_pod_clears(pods):
    endpoints, caches, _ = pods
    scorer = create("kv-events-scorer", {})
    scorer.watch(endpoints)
    time.sleep(0.3)  # SUB sockets join; what is published before is missed (as with vLLM)
    request = parse_request({}, BODY)
    tokens = request.tokens().tokens
    caches["b"].insert(tokens)  # pod b prefilled this prompt: 4 full blocks of 16 (70 tokens)
    until(lambda: scorer.pick(request, endpoints).endpoint.name == "b")
    pick = scorer.pick(request, endpoints)
    assert pick.details == {"kv_predicted_blocks": 4, "kv_prompt_blocks": 4, "kv_block_size": 16}
    assert pick.reason == "KV events: b holds 4/4 leading blocks of 16 tokens"
    caches["b"].clear()  # AllBlocksCleared
    until(lambda: scorer.pick(request, endpoints).details["kv_predicted_blocks"] == 0)
    caches["a"].insert(tokens[:40])  # a holds the first two blocks only
    until(lambda: scorer.pick(request, endpoints).details["kv_predicted_blocks"] == 2)
    assert scorer.pick(request, endpoints).endpoint.name == "a"
    scorer.close()


def test_an_evicted_block_ends_the_run_it_was_part_of(pods):
    endpoints, caches, _ = pods
    scorer = create("kv-events-scorer", {})
    scorer.watch(endpoints)
    time.sleep(0.3)
    request = parse_request({}, BODY)
    small = PrefixCache(16, 3, on_events=caches["a"].on_events)  # pod a's cache, room for three blocks
    small.insert(request.tokens().tokens)  # four blocks stored, the first evicted at once
    until(lambda: scorer.pick(request, endpoints).reason.startswith("no pod holds"))
    scorer.close()
