"""The frontend's KV-aware router, after Dynamo's KV router.

For each worker the router estimates the cost of serving the request there:

    cost = overlap_weight * (prompt blocks the worker would have to prefill)
         + load_weight    * (the worker's queue depth, from /metrics and recent picks)

and picks the cheapest (ties: longest overlap, fewest queued, then rotation). "Blocks the worker would have to
prefill" are the prompt's token blocks minus the leading run the router believes the worker
already holds: the router remembers the chained block hashes of every prompt it sent where,
in an LRU index (Dynamo learns the same from KV events; here the router's own history stands
in for them).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

from eppkit.services.epp.pool import Pool, PoolEndpoint
from eppkit.services.epp.scorers import BlockIndex


@dataclass
class Route:
    worker: PoolEndpoint
    worker_id: str
    overlap_blocks: int
    total_blocks: int
    cost: float
    reason: str


class NoWorker(Exception):
    pass


def block_hashes(tokens: list[str], block_size: int, salt: str = "") -> list[bytes]:
    """One hash per full block of tokens, each covering the whole prefix up to its block's end."""
    out: list[bytes] = []
    prev = hashlib.blake2b(salt.encode(), digest_size=8).digest()
    for start in range(0, len(tokens) - block_size + 1, block_size):
        h = hashlib.blake2b(prev, digest_size=8)
        for tok in tokens[start : start + block_size]:
            h.update(tok.encode())
            h.update(b"\x00")
        prev = h.digest()
        out.append(prev)
    return out


class KvRouter:
    name = "kv"

    def __init__(
        self,
        pool: Pool,
        *,
        block_size: int = 16,
        overlap_weight: float = 1.0,
        load_weight: float = 0.5,
        capacity: int = 65536,
    ):
        if block_size <= 0:
            raise ValueError("block size must be positive")
        self.pool = pool
        self.block_size = block_size
        self.overlap_weight = overlap_weight
        self.load_weight = load_weight
        self._blocks = BlockIndex(capacity)
        self._rotation = itertools.count()

    @staticmethod
    def worker_id(ep: PoolEndpoint) -> str:
        """Dynamo names workers by instance id; the mock's instance name plays that part."""
        return ep.name

    def route(self, tokens: list[str], model: str | None = None) -> Route:
        workers = [ep for ep in self.pool.healthy() if ep.serves(model)]
        if not workers:
            raise NoWorker(
                "no worker available: "
                + ("; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.pool.endpoints) or "the pool is empty")
            )
        hashes = block_hashes(tokens, self.block_size, salt=model or "")
        total = len(hashes)
        turn = next(self._rotation)
        scored = []
        for i, ep in enumerate(workers):
            overlap = self._blocks.match_length(hashes, ep.address)
            cost = self.overlap_weight * (total - overlap) + self.load_weight * ep.queue_depth
            rotation = (i - turn) % len(workers)
            scored.append((cost, -overlap, ep.queue_depth, rotation, ep))
        cost, neg_overlap, depth, _, best = min(scored, key=lambda s: s[:4])
        overlap = -neg_overlap
        self._blocks.record(hashes, best.address)
        self.pool.note_pick(best)
        return Route(
            worker=best,
            worker_id=self.worker_id(best),
            overlap_blocks=overlap,
            total_blocks=total,
            cost=cost,
            reason=(
                f"kv: overlap {overlap}/{total} blocks of {self.block_size} tokens, "
                f"queue {depth:g}, cost {cost:g}"
            ),
        )
