"""The callout's endpoint pool and scorers: who may serve a request, and which one does.

A scorer sees the candidates (the pool, already narrowed to the requested model) and the
parsed request body, and returns one candidate with a short human reason. Scorers are
deterministic for a given sequence of requests, so tests can predict them.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class PoolEndpoint:
    """One backend the callout may pick: ``host:port``, its instance name, and optionally its model."""

    address: str  # host:port, what Envoy's ORIGINAL_DST cluster connects to
    name: str  # instance name, what the mock reports in x-inference-pod
    model: str | None = None  # None: serves whatever is asked


def parse_endpoints(spec: str) -> list[PoolEndpoint]:
    """Parse ``host:port=name[@model],...``; ``=name`` defaults to the address.

    >>> parse_endpoints("127.0.0.1:8001=vllm-0@llama,127.0.0.1:8002")
    [PoolEndpoint(address='127.0.0.1:8001', name='vllm-0', model='llama'), PoolEndpoint(address='127.0.0.1:8002', name='127.0.0.1:8002', model=None)]
    """
    endpoints: list[PoolEndpoint] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        address, _, rest = item.partition("=")
        name, _, model = rest.partition("@")
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {item!r}: expected host:port[=name[@model]]")
        endpoints.append(PoolEndpoint(address=address, name=name or address, model=model or None))
    addresses = [ep.address for ep in endpoints]
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"duplicate endpoint address in {spec!r}")
    return endpoints


class Scorer(Protocol):
    name: str

    def pick(self, candidates: list[PoolEndpoint], body: dict[str, Any]) -> tuple[PoolEndpoint, str]:
        """Choose one of ``candidates`` (never empty) and say why."""
        ...


class RoundRobin:
    """Each pick takes the next candidate in turn, counting separately per candidate set
    (per model pool), so picks for one model do not skip endpoints of another."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counters: dict[tuple[str, ...], itertools.count] = {}

    def pick(self, candidates: list[PoolEndpoint], body: dict[str, Any]) -> tuple[PoolEndpoint, str]:
        counter = self._counters.setdefault(tuple(ep.address for ep in candidates), itertools.count())
        return candidates[next(counter) % len(candidates)], "round-robin"


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt as one string: chat messages' text in order, or the completions ``prompt``."""
    parts: list[str] = []
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            parts.append(str(message.get("role", "")))
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for item in content:
                    if isinstance(item, dict) and isinstance(item.get("text"), str):
                        parts.append(item["text"])
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        parts.append(prompt)
    elif isinstance(prompt, list):
        parts.extend(str(p) for p in prompt)
    return "\n".join(parts)


class PrefixCache:
    """Approximate prefix-cache affinity, in the spirit of the Inference Extension's prefix scorer.

    The prompt is cut into fixed-size character blocks; block ``i`` is identified by a hash
    chained over blocks ``0..i`` (and the model), so two prompts share a block hash only if
    they share the whole prefix up to it. The scorer remembers which endpoint it last sent
    each block hash to (an LRU of ``capacity`` hashes) and picks the candidate holding the
    longest run of leading blocks; with no hit it falls back to round-robin.
    """

    name = "prefix-cache"

    def __init__(self, block_chars: int = 64, capacity: int = 100_000) -> None:
        if block_chars <= 0:
            raise ValueError("block_chars must be positive")
        self.block_chars = block_chars
        self.capacity = capacity
        self._owner: OrderedDict[bytes, str] = OrderedDict()
        self._fallback = RoundRobin()

    def block_hashes(self, body: dict[str, Any]) -> list[bytes]:
        text = prompt_text(body)
        seed = hashlib.blake2b(str(body.get("model", "")).encode(), digest_size=8).digest()
        hashes, previous = [], seed
        for start in range(0, len(text) - len(text) % self.block_chars, self.block_chars):
            block = text[start : start + self.block_chars].encode()
            previous = hashlib.blake2b(previous + block, digest_size=8).digest()
            hashes.append(previous)
        return hashes

    def pick(self, candidates: list[PoolEndpoint], body: dict[str, Any]) -> tuple[PoolEndpoint, str]:
        hashes = self.block_hashes(body)
        by_address = {ep.address: ep for ep in candidates}
        best: PoolEndpoint | None = None
        best_run = 0
        # Hashes are chained, so the owner of block i has seen this whole prefix up to i:
        # the deepest known block names the endpoint with the longest shared prefix.
        for i in range(len(hashes) - 1, -1, -1):
            owner = self._owner.get(hashes[i])
            if owner in by_address:
                best, best_run = by_address[owner], i + 1
                break
        if best is None:
            best, _ = self._fallback.pick(candidates, body)
            reason = f"prefix-miss ({len(hashes)} blocks), round-robin"
        else:
            reason = f"prefix-hit {best_run}/{len(hashes)} blocks"
        for h in hashes:
            self._owner[h] = best.address
            self._owner.move_to_end(h)
        while len(self._owner) > self.capacity:
            self._owner.popitem(last=False)
        return best, reason


SCORERS = {"round-robin": RoundRobin, "prefix-cache": PrefixCache}


def make_scorer(name: str) -> Scorer:
    try:
        return SCORERS[name]()
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; choose one of {', '.join(SCORERS)}") from None
