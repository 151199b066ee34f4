"""KV-cache events as vLLM publishes them (``vllm serve --kv-events-config``): what a cache-aware EPP subscribes to.

Every change of the mock's prefix cache (services/vllm/kvcache.py) is an event; a request's changes (the blocks its
prompt evicted, then the blocks it stored) go out as one batch, as vLLM sends one per engine step:

- ``BlockStored``: ``block_hashes`` (the new blocks, in prompt order; each the sha256 of the whole prefix up to its
  block's end, published as vLLM 0.32 does by default: its low 64 bits as an int, :func:`external_hash`),
  ``parent_block_hash`` (the block before the first, None at the prompt's start), ``token_ids`` (every token of
  those blocks; the ids the kit's tokenizer gives: :func:`eppkit.services.openai_server.tokens.token_id`),
  ``block_size``, ``lora_id`` None, ``medium`` ``"GPU"``, ``lora_name`` None, ``extra_keys`` (None per block),
  ``group_idx`` 0, ``kv_cache_spec_kind`` ``"full_attention"``;
- ``BlockRemoved``: ``block_hashes`` evicted (least recently used first), ``medium``, ``group_idx``;
- ``AllBlocksCleared``: the cache emptied (``POST /reset_prefix_cache``, and once at start: a restarted engine holds
  nothing, and says so).

On the wire (ZeroMQ, as vLLM's ``ZmqEventPublisher``): a PUB socket sends ``(topic, seq, payload)`` per batch, seq
an 8-byte big-endian counter from 0; a ROUTER replay socket answers ``(b"", start_seq)`` with every buffered batch
from ``start_seq`` on, then ``(b"", END_SEQ, b"")``. The payload is msgpack: the batch positional
``[ts, [event, ...], data_parallel_rank]``, each event either a map tagged ``"type"`` (``event_format: named``,
vLLM since vllm-project/vllm#42892, the default) or positional ``["BlockStored", block_hashes, ...]``
(``positional``: older vLLM, llm-d-inference-sim).

``--kv-events-config`` takes vLLM's JSON: ``enable_kv_cache_events``, ``publisher`` (``zmq``), ``endpoint``
(``tcp://127.0.0.1:5557``: the PUB socket binds it), ``replay_endpoint``, ``topic``, ``buffer_steps``, ``hwm``, and the
kit's ``event_format``.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
FORMATS = ("named", "positional")


BlockHash = bytes | int  # vLLM's ExternalBlockHash


def external_hash(digest: bytes) -> BlockHash:
    """A block's hash as vLLM publishes it: the low 64 bits as an int (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by
    default in vLLM 0.32), or the digest itself with the variable set to 0."""
    if os.environ.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1") == "0":
        return digest
    return int.from_bytes(digest, "big") & ((1 << 64) - 1)


@dataclass(frozen=True)
class BlockStored:
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None
    extra_keys: list | None = None  # one entry per block (None: no LoRA, media or salt in its hash)
    group_idx: int | None = 0  # the KV-cache group (one: full attention)
    kv_cache_spec_kind: str | None = "full_attention"


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: list[BlockHash]
    medium: str | None = MEDIUM_GPU
    group_idx: int | None = 0


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared
# Each event's fields in vLLM's order (the positional format's order, the named format's keys).
FIELDS: dict[type, tuple[str, ...]] = {
    BlockStored: ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
                  "extra_keys", "group_idx", "kv_cache_spec_kind"),
    BlockRemoved: ("block_hashes", "medium", "group_idx"),
    AllBlocksCleared: (),
}
BY_TAG = {cls.__name__: cls for cls in FIELDS}


def encode_event(event: Event, event_format: str) -> Any:
    tag, names = type(event).__name__, FIELDS[type(event)]
    if event_format == "positional":
        return [tag, *(getattr(event, n) for n in names)]
    return {"type": tag, **{n: getattr(event, n) for n in names}}


def encode_batch(events: list[Event], event_format: str = "named", ts: float | None = None,
                 data_parallel_rank: int = 0) -> bytes:
    """One batch as vLLM's payload (msgpack)."""
    import msgpack

    batch = [time.time() if ts is None else ts, [encode_event(e, event_format) for e in events], data_parallel_rank]
    return msgpack.packb(batch, use_bin_type=True)


def decode_batch(payload: bytes) -> tuple[float, list[Event]]:
    """A payload back into (ts, events), either format (what the kit's scorer reads from any vLLM-like engine)."""
    import msgpack

    ts, raw_events, *_ = msgpack.unpackb(payload, raw=False)
    events: list[Event] = []
    for raw in raw_events:
        if isinstance(raw, dict):
            cls = BY_TAG.get(raw.get("type"))
            values = {n: raw.get(n) for n in FIELDS.get(cls, ())}
        elif isinstance(raw, list) and raw:
            cls = BY_TAG.get(raw[0])
            values = dict(zip(FIELDS.get(cls, ()), raw[1:]))
        else:
            continue
        if cls is None:
            continue  # an event kind this kit does not know: skipped, as llm-d's indexer skips one
        events.append(cls(**values))
    return ts, events


@dataclass
class KvEventsConfig:
    """vLLM's ``--kv-events-config`` (the keys the mock takes)."""

    enable_kv_cache_events: bool = False
    publisher: str = "zmq"
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    hwm: int = 100_000
    event_format: str = "named"
    extra: dict = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, text: str | None) -> "KvEventsConfig":
        """The JSON of ``--kv-events-config``; ValueError naming what is wrong."""
        if not text:
            return cls()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--kv-events-config is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ValueError("--kv-events-config must be a JSON object")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"--kv-events-config: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        config = cls(**raw)
        if config.publisher not in ("zmq", "null"):
            raise ValueError(f"--kv-events-config: publisher {config.publisher!r}: zmq or null")
        if config.event_format not in FORMATS:
            raise ValueError(f"--kv-events-config: event_format {config.event_format!r}: {' or '.join(FORMATS)}")
        return config

    @staticmethod
    def flag(endpoint: str, topic: str) -> str:
        """``--kv-events-config``'s JSON for a ZeroMQ publisher on ``endpoint`` under ``topic`` (the mock and vLLM)."""
        return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint, "topic": topic},
                          separators=(",", ":"))

    @property
    def enabled(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


class ZmqPublisher:
    """vLLM's publisher: PUB (topic, seq, payload), a ROUTER replay socket, the last ``buffer_steps`` batches kept.
    One thread owns the sockets; :meth:`publish` only queues."""

    def __init__(self, config: KvEventsConfig) -> None:
        import zmq

        self.config = config
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(config.endpoint)
        self._replay = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(config.replay_endpoint)
        self._topic = config.topic.encode()
        self._queue: queue.Queue[list[Event] | None] = queue.Queue()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)  # what the replay socket sends
        self.sent = 0  # batches sent so far (the next seq)
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def publish(self, events: list[Event]) -> None:
        if events:
            self._queue.put(list(events))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=2.0)
        self._ctx.destroy(linger=0)

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                events = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if events is None:
                return
            payload = encode_batch(events, self.config.event_format)
            seq = self.sent
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            self.sent += 1
            self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in self._buffer:
            if seq >= first:
                self._replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))
