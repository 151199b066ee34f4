"""``round-robin``: each pick takes the next candidate in turn.

Turns are counted per candidate set (per model pool), so picks for one model do not skip
endpoints of another.
"""

from __future__ import annotations

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, PoolTurns, register

TYPE = "round-robin"


@register(TYPE)
class RoundRobin:
    def __init__(self) -> None:
        self._turns = PoolTurns()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        turn = self._turns.next(candidates)
        i = turn % len(candidates)
        order = candidates[i:] + candidates[:i]
        return Pick(order[0], f"round-robin turn {turn} -> {i + 1} of {len(candidates)}", order[1:])

