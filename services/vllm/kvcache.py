"""A prefix cache by blocks, enough to make "uncached prompt tokens" mean something.

Prompt tokens are cut into blocks of ``--block-size``; each block is named by the hash
of everything up to and including it (as vLLM's prefix caching does), so a block hits
only when the whole prefix matches. The cache keeps ``--kv-cache-size`` blocks, least
recently used out first. ``usage`` is the vLLM gauge: blocks held by running requests
over capacity. Every change is told to ``on_events`` as vLLM's KV events (services/openai_server/kvevents.py): the blocks
an insert stored (one ``BlockStored`` per run of new blocks, with its parent), those it evicted
(``BlockRemoved``), a ``clear`` (``AllBlocksCleared``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable

from eppkit.services.openai_server.tokens import token_id
from eppkit.services.openai_server.kvevents import AllBlocksCleared, BlockRemoved, BlockStored, Event, external_hash


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int,
                 on_events: Callable[[list[Event]], None] | None = None) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.in_use = 0  # blocks held by running requests
        self.on_events = on_events

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
        hashes = self._hashes(tokens)
        new = [i for i, digest in enumerate(hashes) if digest not in self._blocks]
        for digest in hashes:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        evicted = []
        while len(self._blocks) > self.capacity:
            evicted.append(self._blocks.popitem(last=False)[0])
        if self.on_events is not None and (new or evicted):
            removed = [BlockRemoved([external_hash(d) for d in evicted])] if evicted else []
            self.on_events(self._stored(hashes, new, tokens) + removed)

    def _stored(self, hashes: list[bytes], new: list[int], tokens: list[str]) -> list[Event]:
        """One BlockStored per run of consecutive new blocks, its parent the block before it."""
        runs: list[list[int]] = []
        for i in new:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        size = self.block_size
        return [BlockStored(block_hashes=[external_hash(hashes[i]) for i in run],
                            parent_block_hash=external_hash(hashes[run[0] - 1]) if run[0] else None,
                            token_ids=[token_id(t) for t in tokens[run[0] * size:(run[-1] + 1) * size]],
                            block_size=size, extra_keys=[None] * len(run)) for run in runs]

    def clear(self) -> None:
        """Every block out (vLLM's reset_prefix_cache): AllBlocksCleared."""
        self._blocks.clear()
        if self.on_events is not None:
            self.on_events([AllBlocksCleared()])

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def acquire(self, blocks: int) -> None:
        self.in_use += blocks

    def release(self, blocks: int) -> None:
        self.in_use = max(0, self.in_use - blocks)

    @property
    def usage(self) -> float:
        return min(1.0, self.in_use / self.capacity) if self.capacity else 0.0
