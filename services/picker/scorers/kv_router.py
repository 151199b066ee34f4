"""``kv-router-scorer``: the sidecar frontend's KV-aware router, after Dynamo's KV router.

For each candidate the router estimates the cost of serving the request there:

    cost = overlapWeight * (prompt blocks the worker would have to prefill)
         + loadWeight    * (the worker's queue depth, from /metrics and recent picks)

and picks the cheapest (ties: longest overlap, fewest queued, then rotation). "Blocks the worker
would have to prefill" are the prompt's token blocks minus the leading run the router believes
the worker already holds: it remembers the chained block hashes of every prompt it sent where
(Dynamo learns the same from KV events; here the router's own history stands in for them).
Tokens come from the request (:meth:`LlmRequest.tokens`: the frontend tokenizes in its own span).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, register
from eppkit.services.picker.scorers.block_index import BlockIndex, chained_hashes

TYPE = "kv-router-scorer"


@dataclass(frozen=True)
class Parameters:
    blockSize: int = 16  # noqa: N815 tokens per KV block
    overlapWeight: float = 1.0  # noqa: N815 cost of one block to prefill
    loadWeight: float = 0.5  # noqa: N815 cost of one queued request, in blocks
    lruCapacity: int = 65536  # noqa: N815 block hashes remembered, over all workers

    def __post_init__(self) -> None:
        if self.blockSize <= 0:
            raise ValueError(f"{TYPE}: blockSize must be positive")


def block_hashes(tokens: list[str], block_size: int, salt: str = "") -> list[bytes]:
    """One hash per full block of tokens, each covering the whole prefix up to its block's end."""
    blocks = (b"".join(tok.encode() + b"\x00" for tok in tokens[i : i + block_size])
              for i in range(0, len(tokens) - block_size + 1, block_size))
    return chained_hashes(blocks, seed=salt)


@register(TYPE, Parameters)
class KvRouterScorer:
    def __init__(self, parameters: Parameters = Parameters()):
        self.p = parameters
        self._blocks = BlockIndex(parameters.lruCapacity)
        self._rotation = itertools.count()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        hashes = block_hashes(request.tokens().tokens, self.p.blockSize, salt=request.model or "")
        total = len(hashes)
        turn = next(self._rotation)
        scored = []
        for i, ep in enumerate(candidates):
            overlap = self._blocks.match_length(hashes, ep.address)
            cost = self.p.overlapWeight * (total - overlap) + self.p.loadWeight * ep.queue_depth
            scored.append((cost, -overlap, ep.queue_depth, (i - turn) % len(candidates), ep))
        scored.sort(key=lambda s: s[:4])
        cost, neg_overlap, depth, _, best = scored[0]
        self._blocks.record(hashes, best.address)
        reason = (f"kv: overlap {-neg_overlap}/{total} blocks of {self.p.blockSize} tokens, "
                  f"queue {depth:g}, cost {cost:g}")
        return Pick(best, reason, [s[4] for s in scored[1:]],
                    details={"overlap_blocks": -neg_overlap, "total_blocks": total})

