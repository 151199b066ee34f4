"""``lora-affinity-scorer``: a request for a LoRA adapter goes where the adapter is running, else where there is room
to load it, after GAIE's lora-affinity scorer.

Each pod's adapters come from its ``/metrics`` as vLLM writes them (``vllm:lora_requests_info``: running and waiting
adapters, ``max_lora``; :mod:`eppkit.services.openai_server.lora_info`), scraped with its load. The tiers, best first,
are GAIE's: the adapter running there; room for one more adapter (running and waiting adapters under ``max_lora``);
the adapter waiting there; none of these (or no LoRA figures). Within a tier the least loaded wins (queue-scorer's
order). A request for the base model is ranked the same way: it needs no slot, but GAIE's scorer does not know that
either.
"""

from __future__ import annotations

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Pick, register
from eppkit.services.picker.scorers.queue import QueueScorer

TYPE = "lora-affinity-scorer"
RUNNING, ROOM, WAITING, NONE = range(4)
WORDS = {RUNNING: "adapter running", ROOM: "room to load the adapter", WAITING: "adapter waiting",
         NONE: "no adapter slot known"}


def tier(ep: PoolEndpoint, model: str | None) -> int:
    info = ep.lora
    if model is None:
        return RUNNING  # nothing to hold: every pod alike, the load decides
    if info is None:
        return NONE
    if model in info.running:
        return RUNNING
    if info.has_room:
        return ROOM
    return WAITING if model in info.waiting else NONE


@register(TYPE)
class LoraAffinityScorer:
    def __init__(self) -> None:
        self._queue = QueueScorer()

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick:
        model = request.requested_model
        order = sorted(self._queue.order(candidates), key=lambda ep: tier(ep, model))  # stable: by load within a tier
        first = order[0]
        return Pick(first, f"{WORDS[tier(first, model)]} ({model}): {first.describe_load()}", order[1:])
