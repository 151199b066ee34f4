"""``queue-scorer``: the endpoint with the shortest queue, from the scraped vLLM metrics.

GAIE's queue-scorer ranks by the waiting queue; this one also counts running requests (a
waiting request weighs twice a running one) and the picks sent since the last scrape, so a
burst between two scrapes spreads instead of piling onto the endpoint that looked idle.
"""

from __future__ import annotations

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, PoolTurns, register

TYPE = "queue-scorer"


def load_key(ep: PoolEndpoint) -> tuple[float, float]:
    """Sort key for 'least loaded': a waiting request costs more than a running one."""
    waiting = (ep.waiting or 0.0) + ep.picked_since_scrape
    return (2.0 * waiting + (ep.running or 0.0), waiting)


@register(TYPE)
class QueueScorer:
    def __init__(self) -> None:
        self._tiebreak = PoolTurns()

    def order(self, candidates: list[PoolEndpoint]) -> list[PoolEndpoint]:
        """Candidates, least loaded first; equal loads in a rotating order per model pool so ties spread."""
        i = self._tiebreak.next(candidates) % len(candidates)
        return sorted(candidates[i:] + candidates[:i], key=load_key)

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        order = self.order(candidates)
        return Pick(order[0], f"least queue: {order[0].describe_load()}", order[1:])

