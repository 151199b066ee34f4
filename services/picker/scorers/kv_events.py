"""``kv-events-scorer``: precise prefix-cache affinity from the pods' own KV-cache events, after llm-d's precise
prefix-cache scorer and Dynamo's KV router.

Each pod publishes what its KV cache stores and evicts (vLLM's ``--kv-events-config``: ZeroMQ, msgpack; the kit's
mock does the same: services/openai_server/kvevents.py). The scorer subscribes to every candidate's publisher (the pool's
``--kv-events name=tcp://host:port`` list, else ``tcp://<pod host>:<port>`` with the ``port`` parameter, as a
controller learns pods) and keeps, per pod, the blocks it holds. An engine names a block by its own hash; the index
names it by the content it covers (a chain of sha256 over the block's token ids and its parent's name), so a
request's prompt, tokenized by the kit's tokenizer, finds the blocks whatever hash the engine uses. The pod holding
the longest run of the prompt's leading blocks wins; ties and cold prompts go to the least-loaded pod (queue-scorer's
order). ``AllBlocksCleared``, or a publisher whose sequence starts again (a restarted pod), empties that pod's
entry.

What it predicts is on the decision: ``details["kv_predicted_blocks"]`` (the run it expects to hit) and
``kv_prompt_blocks``; the pod's own prefill span says what it actually hit (``vllm.prefix_cached_tokens``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass

from eppkit.services.openai_server.kvevents import AllBlocksCleared, BlockRemoved, BlockStored, decode_batch
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, register
from eppkit.services.picker.scorers.queue import QueueScorer, load_key

TYPE = "kv-events-scorer"
log = logging.getLogger("picker.kv_events")


@dataclass(frozen=True)
class Parameters:
    blockSize: int = 16  # noqa: N815 tokens per block until a pod's first BlockStored says its own
    port: int = 0  # a pod's publisher at tcp://<its host>:<port> when the pool names none (0: only those named)
    topic: str = ""  # the topic prefix subscribed to ("" every topic)

    def __post_init__(self) -> None:
        if self.blockSize <= 0:
            raise ValueError(f"{TYPE}: blockSize must be positive")


def content_key(parent: bytes | None, token_ids: list[int]) -> bytes:
    """A block's name by what it covers: its parent's name and its own token ids."""
    h = hashlib.sha256(parent or b"")
    h.update(b"".join(t.to_bytes(4, "big") for t in token_ids))
    return h.digest()


def prompt_keys(token_ids: list[int], block_size: int) -> list[bytes]:
    """The content names of a prompt's full blocks, in order."""
    keys, parent = [], None
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        parent = content_key(parent, token_ids[i:i + block_size])
        keys.append(parent)
    return keys


class PodBlocks:
    """What one pod holds: its engine hashes mapped to content names (and the reverse set)."""

    def __init__(self) -> None:
        self.by_engine: dict[bytes | int, bytes] = {}
        self.held: set[bytes] = set()
        self.block_size: int | None = None
        self.last_seq: int | None = None

    def clear(self) -> None:
        self.by_engine.clear()
        self.held.clear()

    def apply(self, event) -> None:
        if isinstance(event, AllBlocksCleared):
            self.clear()
        elif isinstance(event, BlockRemoved):
            for engine_hash in event.block_hashes or []:
                key = self.by_engine.pop(_hashable(engine_hash), None)
                if key is not None:
                    self.held.discard(key)
        elif isinstance(event, BlockStored):
            size = int(event.block_size)
            self.block_size = size
            parent = self.by_engine.get(_hashable(event.parent_block_hash)) if event.parent_block_hash is not None else None
            tokens = list(event.token_ids or [])
            for n, engine_hash in enumerate(event.block_hashes or []):
                parent = content_key(parent, tokens[n * size:(n + 1) * size])
                self.by_engine[_hashable(engine_hash)] = parent
                self.held.add(parent)


def _hashable(value):
    return bytes(value) if isinstance(value, (bytes, bytearray, list)) else value


class Subscriber:
    """One thread, one ZeroMQ SUB socket per publisher, the pods' blocks kept under a lock."""

    def __init__(self, topic: str = "") -> None:
        self.topic = topic.encode()
        self.pods: dict[str, PodBlocks] = {}  # publisher URL -> blocks
        self.lock = threading.Lock()
        self._wanted: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def watch(self, url: str) -> PodBlocks:
        with self.lock:
            pod = self.pods.get(url)
            if pod is None:
                pod = self.pods[url] = PodBlocks()
                self._wanted.add(url)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kv-events-subscriber", daemon=True)
            self._thread.start()
        return pod

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        import zmq

        ctx = zmq.Context()
        poller = zmq.Poller()
        sockets: dict[object, str] = {}
        try:
            while not self._stop.is_set():
                with self.lock:
                    new, self._wanted = self._wanted, set()
                for url in new:
                    sock = ctx.socket(zmq.SUB)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.SUBSCRIBE, self.topic)
                    sock.connect(url)
                    poller.register(sock, zmq.POLLIN)
                    sockets[sock] = url
                for sock, _ in poller.poll(50):
                    try:
                        _topic, seq_bytes, payload = sock.recv_multipart()
                        _ts, events = decode_batch(payload)
                    except (ValueError, TypeError) as exc:  # a malformed batch is skipped, said once per batch
                        log.warning("bad KV event batch from %s: %s", sockets[sock], exc)
                        continue
                    seq = int.from_bytes(seq_bytes, "big")
                    with self.lock:
                        pod = self.pods[sockets[sock]]
                        if pod.last_seq is not None and seq <= pod.last_seq:
                            pod.clear()  # the publisher started again (a restarted pod): it holds nothing it told
                        pod.last_seq = seq
                        for event in events:
                            pod.apply(event)
        finally:
            ctx.destroy(linger=0)


@register(TYPE, Parameters)
class KvEventsScorer:
    def __init__(self, parameters: Parameters = Parameters()):
        self.p = parameters
        self.subscriber = Subscriber(parameters.topic)
        self._by_load = QueueScorer()

    def publisher_of(self, ep: PoolEndpoint) -> str | None:
        if ep.kv_events:
            return ep.kv_events
        return f"tcp://{ep.host}:{self.p.port}" if self.p.port else None

    def watch(self, endpoints: list[PoolEndpoint]) -> None:
        """Subscribe now to these endpoints' publishers (the picker's start: events before the first request)."""
        for ep in endpoints:
            url = self.publisher_of(ep)
            if url:
                self.subscriber.watch(url)

    def close(self) -> None:
        self.subscriber.close()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        ids = request.tokens().token_ids if request.json_body else []
        pods = {ep.name: self.subscriber.watch(url) for ep in candidates if (url := self.publisher_of(ep))}
        with self.subscriber.lock:
            sizes = {pod.block_size for pod in pods.values() if pod.block_size}
            size = sizes.pop() if len(sizes) == 1 else self.p.blockSize
            keys = prompt_keys(ids, size)

            def run(ep: PoolEndpoint) -> int:
                held = pods[ep.name].held if ep.name in pods else ()
                n = 0
                for key in keys:
                    if key not in held:
                        break
                    n += 1
                return n

            scored = {ep.name: run(ep) for ep in candidates}
        best = max(scored.values())
        if best == 0:
            chosen = self._by_load.order(candidates)[0]
            reason = f"no pod holds this prompt's first block ({len(keys)} blocks of {size}); least queue: " \
                     f"{chosen.describe_load()}"
        else:
            tied = [ep for ep in candidates if scored[ep.name] == best]
            chosen = tied[0] if len(tied) == 1 else self._by_load.order(tied)[0]
            reason = f"KV events: {chosen.name} holds {best}/{len(keys)} leading blocks of {size} tokens"
        rest = sorted((ep for ep in candidates if ep is not chosen), key=lambda ep: (-scored[ep.name], load_key(ep)))
        return Pick(chosen, reason, rest, details={"kv_predicted_blocks": scored[chosen.name],
                                                   "kv_prompt_blocks": len(keys), "kv_block_size": size})
