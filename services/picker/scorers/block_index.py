"""What a router believes each endpoint holds in its KV cache: chained block hashes -> endpoints.

Shared by the prefix-cache-scorer (character blocks) and the kv-router-scorer (token blocks).
Registers no scorer.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Iterable


def chained_hashes(blocks: Iterable[bytes], seed: str = "") -> list[bytes]:
    """One hash per block, each chained to the previous one (the first to ``seed``): two prompts share
    a block's hash only if they share the whole prefix up to the end of that block."""
    out: list[bytes] = []
    prev = hashlib.blake2b(seed.encode(), digest_size=8).digest()
    for block in blocks:
        prev = hashlib.blake2b(prev + block, digest_size=8).digest()
        out.append(prev)
    return out


class BlockIndex:
    """Block hashes -> the addresses that were sent them, LRU-bounded."""

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
