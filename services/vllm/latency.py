"""The latency model: how long prefill, KV transfer and each output token take.

Pure functions of the configuration, the request's numbers and a seeded RNG, so tests
can check every rule without a clock. Times come in and go out in milliseconds.

Rules (llm-d-inference-sim's, where it has one):
- prefill: ``--time-to-first-token`` (+ jitter), or, when ``--prefill-overhead`` or
  ``--prefill-time-per-token`` is set, overhead + per-token x uncached prompt tokens
  (+ ``--prefill-time-std-dev``); plus ``--ec-miss-latency`` per media item missing
  from the encoder cache.
- KV transfer (decode side of P/D): ``--kv-cache-transfer-time-per-token`` x prompt tokens
  when set, else ``--kv-cache-transfer-latency``; each with its jitter.
- inter-token latency: ``--inter-token-latency`` (+ jitter) per token after the first.
- load: every time above is multiplied by a factor that grows linearly from 1.0 with one
  running request to ``--time-factor-under-load`` with ``--max-num-seqs`` running.
- jitter is a normal draw clipped so a value never moves more than 70% from its base.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eppkit.services.openai_server.jitter import jittered
from eppkit.services.vllm.config import VllmConfig


@dataclass(frozen=True)
class Overrides:
    """Per-request latency overrides from x-mock-* headers (milliseconds; None: use flags)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    kv_transfer_ms: float | None = None


class LatencyModel:
    def __init__(self, config: VllmConfig) -> None:
        self.c = config

    def load_factor(self, running: int) -> float:
        """1.0 with one request running, --time-factor-under-load at --max-num-seqs."""
        factor = self.c.time_factor_under_load
        if factor <= 1.0 or self.c.max_num_seqs <= 1 or running <= 1:
            return 1.0
        fraction = min(running - 1, self.c.max_num_seqs - 1) / (self.c.max_num_seqs - 1)
        return 1.0 + (factor - 1.0) * fraction

    @property
    def per_token_prefill(self) -> bool:
        return self.c.prefill_overhead > 0 or self.c.prefill_time_per_token > 0

    def prefill_ms(
        self,
        uncached_prompt_tokens: int,
        rng: random.Random,
        *,
        running: int = 1,
        ec_misses: int = 0,
        override: float | None = None,
    ) -> float:
        if override is not None:
            return override
        c = self.c
        if self.per_token_prefill:
            base = c.prefill_overhead + c.prefill_time_per_token * max(uncached_prompt_tokens, 0)
            value = jittered(base, c.prefill_time_std_dev, rng)
        else:
            value = jittered(c.time_to_first_token, c.time_to_first_token_std_dev, rng)
        value += c.ec_miss_latency * ec_misses
        return value * self.load_factor(running)

    def kv_transfer_ms(
        self, prompt_tokens: int, rng: random.Random, *, running: int = 1, override: float | None = None
    ) -> float:
        if override is not None:
            return override
        c = self.c
        if c.kv_cache_transfer_time_per_token > 0:
            per_token = jittered(c.kv_cache_transfer_time_per_token, c.kv_cache_transfer_time_std_dev, rng)
            value = per_token * max(prompt_tokens, 0)
        else:
            value = jittered(c.kv_cache_transfer_latency, c.kv_cache_transfer_latency_std_dev, rng)
        return value * self.load_factor(running)

    def inter_token_ms(self, rng: random.Random, *, running: int = 1, override: float | None = None) -> float:
        if override is not None:
            return override
        c = self.c
        return jittered(c.inter_token_latency, c.inter_token_latency_std_dev, rng) * self.load_factor(running)


def token_deadlines(start: float, gaps_s: list[float]) -> list[float]:
    """Absolute deadlines for tokens 2..n: each one gap after the previous *deadline*.

    Scheduling against deadlines (not sleeping one gap after each write) keeps a late
    token from pushing every later token back: errors do not accumulate.
    """
    out = []
    t = start
    for gap in gaps_s:
        t += gap
        out.append(t)
    return out
