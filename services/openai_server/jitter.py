"""Latency jitter, as vLLM's simulator draws it: the mocks' times vary around their flags."""

from __future__ import annotations

import random

# A jittered value stays within base*(1 +- this).
_MAX_DEVIATION = 0.7


def jittered(base: float, std_dev: float, rng: random.Random) -> float:
    """``base`` plus a normal draw of ``std_dev``, clipped to base +- 70%; never negative."""
    if std_dev <= 0 or base <= 0:
        return max(base, 0.0)
    value = rng.gauss(base, std_dev)
    low, high = base * (1 - _MAX_DEVIATION), base * (1 + _MAX_DEVIATION)
    return min(max(value, low), high)
