"""A prefix cache by blocks, enough to make "uncached prompt tokens" mean something.

Prompt tokens are cut into blocks of ``--block-size``; each block is named by the hash
of everything up to and including it (as vLLM's prefix caching does), so a block hits
only when the whole prefix matches. The cache keeps ``--kv-cache-size`` blocks, least
recently used out first. ``usage`` is the vLLM gauge: blocks held by running requests
over capacity.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.in_use = 0  # blocks held by running requests

    def _hashes(self, tokens: list[str]) -> list[bytes]:
        out = []
        h = hashlib.sha256()
        full = len(tokens) // self.block_size
        for b in range(full):
            for tok in tokens[b * self.block_size : (b + 1) * self.block_size]:
                h.update(tok.encode())
                h.update(b"\x00")
            out.append(h.copy().digest())
        return out

    def cached_tokens(self, tokens: list[str]) -> int:
        """How many leading prompt tokens are already cached (whole blocks only)."""
        hits = 0
        for digest in self._hashes(tokens):
            if digest not in self._blocks:
                break
            self._blocks.move_to_end(digest)
            hits += 1
        return hits * self.block_size

    def insert(self, tokens: list[str]) -> None:
        for digest in self._hashes(tokens):
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def acquire(self, blocks: int) -> None:
        self.in_use += blocks

    def release(self, blocks: int) -> None:
        self.in_use = max(0, self.in_use - blocks)

    @property
    def usage(self) -> float:
        return min(1.0, self.in_use / self.capacity) if self.capacity else 0.0
