"""``prefix-cache-scorer``: approximate prefix-cache affinity, after GAIE's prefix plugin.

The prompt text is cut into ``hashBlockSize``-character blocks, each block's hash chained to the
previous one (and seeded with the model), and an LRU index remembers which endpoint was sent
which block hashes. The endpoint holding the longest run of leading blocks wins; ties and cold
prompts go to the least-loaded endpoint (queue-scorer's order).
"""

from __future__ import annotations

from dataclasses import dataclass

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, register
from eppkit.services.picker.scorers.block_index import BlockIndex, chained_hashes
from eppkit.services.picker.scorers.queue import QueueScorer, load_key

TYPE = "prefix-cache-scorer"


@dataclass(frozen=True)
class Parameters:
    hashBlockSize: int = 64  # noqa: N815 (GAIE's parameter name) characters per block
    lruCapacity: int = 65536  # noqa: N815 block hashes remembered, over all endpoints


class PrefixIndex(BlockIndex):
    """A :class:`BlockIndex` over chained hashes of the request text's fixed-size blocks."""

    def __init__(self, block_size: int = 64, capacity: int = 65536):
        if block_size <= 0:
            raise ValueError(f"{TYPE}: hashBlockSize must be positive")
        super().__init__(capacity)
        self.block_size = block_size

    def hashes(self, model: str | None, text: str) -> list[bytes]:
        """One hash per full block; each covers the whole prefix up to its block's end."""
        data, size = text.encode("utf-8"), self.block_size
        return chained_hashes((data[i : i + size] for i in range(0, len(data) - size + 1, size)), seed=model or "")


@register(TYPE, Parameters)
class PrefixCacheScorer:
    def __init__(self, parameters: Parameters = Parameters()):
        self.index = PrefixIndex(parameters.hashBlockSize, parameters.lruCapacity)
        self._by_load = QueueScorer()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        hashes = self.index.hashes(request.model, request.prompt)
        scored = [(self.index.match_length(hashes, ep.address), ep) for ep in candidates]
        best_len = max(n for n, _ in scored)
        if best_len == 0:
            chosen = self._by_load.order(candidates)[0]
            reason = f"no cached prefix ({len(hashes)} blocks); least queue: {chosen.describe_load()}"
        else:
            tied = [ep for n, ep in scored if n == best_len]
            chosen = tied[0] if len(tied) == 1 else self._by_load.order(tied)[0]
            reason = f"prefix hit {best_len}/{len(hashes)} blocks of {self.index.block_size} chars"
        self.index.record(hashes, chosen.address)
        rest = sorted((ep for ep in candidates if ep is not chosen),
                      key=lambda ep: (-self.index.match_length(hashes, ep.address), load_key(ep)))
        return Pick(chosen, reason, rest)

