"""The mock's KV-cache events: what its prefix cache tells, as vLLM encodes it, over ZeroMQ as vLLM sends it."""

import time

import msgpack
import pytest
import zmq

from eppkit.services.openai_server.tokens import token_id
from eppkit.services.vllm.kvcache import PrefixCache
from eppkit.services.openai_server.kvevents import (END_SEQ, AllBlocksCleared, BlockRemoved, BlockStored, KvEventsConfig,
                                           ZmqPublisher, decode_batch, encode_batch, external_hash)

pytestmark = pytest.mark.unit


def tokens(n, word="w"):
    return [f"{word}{i}" for i in range(n)]


def test_an_insert_tells_the_new_blocks_with_their_parent_and_tokens_and_what_it_evicted():
    told = []
    cache = PrefixCache(block_size=4, capacity_blocks=3, on_events=told.append)
    cache.insert(tokens(9))  # two full blocks; the ninth token is no block
    (stored,) = told.pop()
    assert isinstance(stored, BlockStored) and stored.parent_block_hash is None and stored.block_size == 4
    assert len(stored.block_hashes) == 2 and stored.token_ids == [token_id(t) for t in tokens(8)]
    assert all(isinstance(h, int) and h < 2**64 for h in stored.block_hashes)  # vLLM 0.32's default: 64-bit ints
    assert (stored.extra_keys, stored.group_idx, stored.kv_cache_spec_kind) == ([None, None], 0, "full_attention")
    cache.insert(tokens(9))
    assert told == [], "nothing new, nothing told"
    cache.insert(tokens(16))  # blocks 3 and 4 are new: the cache holds 3, so block 1 (least recently used) goes
    stored, removed = told.pop()
    assert stored.parent_block_hash == stored_first_two(cache, 4)[1] and len(stored.block_hashes) == 2
    assert isinstance(removed, BlockRemoved) and removed.block_hashes == [stored_first_two(cache, 4)[0]]
    cache.clear()
    assert told.pop() == [AllBlocksCleared()]
    assert cache.cached_tokens(tokens(16)) == 0


def stored_first_two(cache, size):
    return [external_hash(d) for d in cache._hashes(tokens(2 * size))]


@pytest.mark.parametrize("event_format", ["named", "positional"])
def test_both_formats_decode_back_to_the_same_events(event_format):
    events = [BlockStored([b"\x01" * 32], None, [1, 2], 2), BlockRemoved([b"\x02" * 32]), AllBlocksCleared()]
    payload = encode_batch(events, event_format, ts=12.5)
    raw = msgpack.unpackb(payload)
    assert raw[0] == 12.5 and raw[2] == 0  # [ts, events, data_parallel_rank]
    first = raw[1][0]
    if event_format == "named":  # vLLM since vllm-project/vllm#42892: maps tagged "type"
        assert first["type"] == "BlockStored" and first["block_hashes"] == [b"\x01" * 32] and first["medium"] == "GPU"
    else:  # older vLLM and llm-d-inference-sim: positional, the tag first
        assert first[:5] == ["BlockStored", [b"\x01" * 32], None, [1, 2], 2] and first[-2:] == [0, "full_attention"]
    assert decode_batch(payload) == (12.5, events)


def test_the_config_is_vllms_json_and_names_what_is_wrong():
    config = KvEventsConfig.parse('{"enable_kv_cache_events": true, "publisher": "zmq", "topic": "kv@a@m"}')
    assert config.enabled and config.endpoint == "tcp://127.0.0.1:5557" and config.event_format == "named"
    with pytest.raises(ValueError, match="unknown key.*endpont"):
        KvEventsConfig.parse('{"endpont": "tcp://*:1"}')
    with pytest.raises(ValueError, match="event_format 'xml'"):
        KvEventsConfig.parse('{"event_format": "xml"}')
    assert not KvEventsConfig.parse(None).enabled


def test_batches_go_out_in_sequence_and_the_replay_socket_sends_them_again():
    ctx = zmq.Context()
    pub_port, replay_port = _free_port(), _free_port()
    publisher = ZmqPublisher(KvEventsConfig(enable_kv_cache_events=True, endpoint=f"tcp://127.0.0.1:{pub_port}",
                                            replay_endpoint=f"tcp://127.0.0.1:{replay_port}", topic="kv@vllm-0@m"))
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{pub_port}")
    try:
        time.sleep(0.3)  # a SUB socket misses what is sent before it joined (the replay socket is for that)
        for i in range(3):
            publisher.publish([BlockRemoved([bytes([i]) * 32])])
        got = []
        while len(got) < 3 and sub.poll(5000):
            topic, seq, payload = sub.recv_multipart()
            got.append((topic, int.from_bytes(seq, "big"), decode_batch(payload)[1]))
        assert [(t, s) for t, s, _ in got] == [(b"kv@vllm-0@m", 0), (b"kv@vllm-0@m", 1), (b"kv@vllm-0@m", 2)]
        replay = ctx.socket(zmq.DEALER)
        replay.connect(f"tcp://127.0.0.1:{replay_port}")
        replay.send_multipart((b"", (1).to_bytes(8, "big")))
        frames = []
        while replay.poll(5000):
            frame = replay.recv_multipart()
            frames.append(frame)
            if frame[2] == END_SEQ:
                break
        assert [int.from_bytes(f[2], "big") for f in frames[:-1]] == [1, 2] and frames[-1][1:] == [b"", END_SEQ, b""]
        replay.close(0)
    finally:
        sub.close(0)
        publisher.close()
        ctx.term()


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
