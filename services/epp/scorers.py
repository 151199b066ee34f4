"""Pluggable scorers: given the request and the candidate endpoints, choose one (plus fallbacks).

- ``round-robin``: rotate over the candidates.
- ``least-queue``: lowest queue depth from the scraped vLLM metrics (waiting weighs more than
  running), picks since the last scrape counted in.
- ``prefix-cache``: approximate prefix-cache affinity in the style of the Gateway API Inference
  Extension's prefix plugin: the prompt is cut into fixed-size character blocks, each block's
  hash chained to the previous one, and an LRU index remembers which endpoint was sent which
  block hashes. The endpoint holding the longest run of leading blocks wins; ties (and cold
  prompts) go to the least-loaded endpoint.

Every scorer answers a :class:`Pick` whose ``reason`` says in words why, for the ``epp.reason``
span attribute.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from eppkit.services.epp.pool import PoolEndpoint
from eppkit.services.epp.request import LlmRequest

SCORERS = ("round-robin", "least-queue", "prefix-cache")


@dataclass
class Pick:
    endpoint: PoolEndpoint
    reason: str
    fallbacks: list[PoolEndpoint] = field(default_factory=list)


class Scorer(Protocol):
    name: str

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        """``candidates`` is non-empty and in pool order."""
        ...


class RoundRobin:
    name = "round-robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        turn = next(self._counter)
        i = turn % len(candidates)
        order = candidates[i:] + candidates[:i]
        return Pick(order[0], f"round-robin turn {turn} -> {i + 1} of {len(candidates)}", order[1:])


def load_key(ep: PoolEndpoint) -> tuple[float, float]:
    """Sort key for 'least loaded': a waiting request costs more than a running one."""
    waiting = (ep.waiting or 0.0) + ep.picked_since_scrape
    return (2.0 * waiting + (ep.running or 0.0), waiting)


class LeastQueue:
    name = "least-queue"

    def __init__(self) -> None:
        self._tiebreak = itertools.count()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        # Rotate before the stable sort so equal loads do not always go to the first endpoint.
        i = next(self._tiebreak) % len(candidates)
        order = sorted(candidates[i:] + candidates[:i], key=load_key)
        best = order[0]
        return Pick(best, f"least queue: {best.describe_load()}", order[1:])


class BlockIndex:
    """Block hashes -> the endpoints that were sent them, LRU-bounded: a router's guess at
    what each endpoint holds in its KV cache (the EPP's prefix scorer and the sidecar
    frontend's KV router both keep one)."""

    def __init__(self, capacity: int = 65536):
        self.capacity = capacity
        self._index: OrderedDict[bytes, set[str]] = OrderedDict()

    def match_length(self, hashes: list[bytes], address: str) -> int:
        """How many leading blocks ``address`` is believed to hold."""
        n = 0
        for h in hashes:
            holders = self._index.get(h)
            if holders is None or address not in holders:
                break
            n += 1
        return n

    def record(self, hashes: list[bytes], address: str) -> None:
        for h in hashes:
            holders = self._index.get(h)
            if holders is None:
                holders = self._index[h] = set()
            else:
                self._index.move_to_end(h)
            holders.add(address)
        while len(self._index) > self.capacity:
            self._index.popitem(last=False)

    def __len__(self) -> int:
        return len(self._index)


class PrefixIndex(BlockIndex):
    """A :class:`BlockIndex` over chained hashes of the request text's fixed-size blocks."""

    def __init__(self, block_size: int = 64, capacity: int = 65536):
        if block_size <= 0:
            raise ValueError("prefix block size must be positive")
        super().__init__(capacity)
        self.block_size = block_size

    def hashes(self, model: str | None, text: str) -> list[bytes]:
        """One hash per full block; each covers the whole prefix up to its block's end."""
        out: list[bytes] = []
        prev = hashlib.blake2b((model or "").encode(), digest_size=8).digest()
        data = text.encode("utf-8")
        for start in range(0, len(data) - self.block_size + 1, self.block_size):
            prev = hashlib.blake2b(prev + data[start : start + self.block_size], digest_size=8).digest()
            out.append(prev)
        return out


class PrefixCache:
    name = "prefix-cache"

    def __init__(self, block_size: int = 64, capacity: int = 65536):
        self.index = PrefixIndex(block_size, capacity)
        self._fallback = LeastQueue()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        hashes = self.index.hashes(request.model, request.prompt)
        scored = [(self.index.match_length(hashes, ep.address), ep) for ep in candidates]
        best_len = max(n for n, _ in scored)
        if best_len == 0:
            by_load = self._fallback.pick(request, candidates)
            chosen, reason = by_load.endpoint, f"no cached prefix ({len(hashes)} blocks); {by_load.reason}"
        else:
            tied = [ep for n, ep in scored if n == best_len]
            chosen = tied[0] if len(tied) == 1 else self._fallback.pick(request, tied).endpoint
            reason = f"prefix hit {best_len}/{len(hashes)} blocks of {self.index.block_size} chars"
        self.index.record(hashes, chosen.address)
        rest = sorted((ep for ep in candidates if ep is not chosen), key=lambda ep: (-self.index.match_length(hashes, ep.address), load_key(ep)))
        return Pick(chosen, reason, rest)


def make_scorer(name: str, *, prefix_block_size: int = 64) -> Scorer:
    if name == "round-robin":
        return RoundRobin()
    if name == "least-queue":
        return LeastQueue()
    if name == "prefix-cache":
        return PrefixCache(block_size=prefix_block_size)
    raise ValueError(f"unknown scorer {name!r}; choose one of {', '.join(SCORERS)}")
