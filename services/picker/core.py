"""The picker without a transport: force, shed, narrow, score, add the stages.

:class:`Picker` turns an :class:`LlmRequest` into a :class:`Decision` (or raises
:class:`PickError`), in this order:

0. flow control, when on (:mod:`eppkit.services.picker.flow_control`): while the pool is saturated the request
   waits in the picker, by priority band and fairness, up to its TTL (not for a forced or steered-to-shed request);
1. shed hook: ``x-eppkit-shed: 1`` is a 429 (test steering, as a saturated pool would answer);
2. force hook: ``x-eppkit-force-endpoint`` (or GAIE's ``test-epp-endpoint-selection``) names the
   endpoint (and fallbacks): the first named one in the pool that serves the requested model, health
   aside;
3. candidates: the healthy endpoints serving the requested model, within the data plane's subset hint
   when it gives one (404 for a model nobody serves, 503 when none is up or none is in the subset);
4. shed hooks: a sheddable request (its InferenceObjective's priority negative) while the candidates are saturated
   is a 429 (GAIE's rule: :mod:`eppkit.services.picker.saturation`); every candidate's waiting queue at
   ``shed_queue_threshold`` or over is a 429 whatever the priority;
5. the scorer picks; the rest of its order (up to ``max_fallbacks``) become the fallbacks;
6. stages (pd / epd / ttft): the prefiller and encoders (:mod:`eppkit.services.picker.stages`).

The transports (ext_proc in services/epp, HTTP ``/pick`` in services/callout, the routing query in
services/frontend) only read the request off the wire and write the decision back.
"""

from __future__ import annotations

from eppkit.services.picker import headers as h
from eppkit.services.picker import roles
from eppkit.services.picker.decision import Decision, PickError
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.flow_control import DROPPED_REASON, Dropped, FlowController, fairness_id
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.saturation import Objectives, Saturation, sheddable
from eppkit.services.picker.scorers import Scorer
from eppkit.services.picker.stages import StagePicker, forced

FORCED = "forced"  # the scorer name a forced decision reports


# The headers that force the pick, the kit's own first (test steering; see headers.py).
FORCE_HEADERS = (h.FORCE_ENDPOINT, h.TEST_ENDPOINT_SELECTION)


def forced_decision(pool: Pool, request: LlmRequest) -> Decision | None:
    """Honour ``x-eppkit-force-endpoint`` or GAIE's ``test-epp-endpoint-selection``; None when neither is sent."""
    header = next((name for name in FORCE_HEADERS if name in request.headers), None)
    if header is None:
        return None
    value = request.headers[header]
    found = forced(pool, header, value, every=False, scorer=FORCED)
    if request.subset is not None:
        found = [ep for ep in found if ep.address in request.subset]
    model = request.requested_model
    found = [ep for ep in found if ep.serves(model)]
    if not found:
        raise PickError(503, f"no endpoint available: {header}={value!r} names no endpoint serving the "
                             f"model {model!r}", code="no_endpoint", scorer=FORCED, param=header)
    pool.note_pick(found[0])
    return Decision(endpoint=found[0], address=found[0].address, scorer=FORCED,
                    reason=f"{header}: {value}", fallbacks=[ep.address for ep in found[1:]])


def shed_by_header(request: LlmRequest, scorer: str) -> None:
    if h.is_true(request.headers.get(h.SHED)):
        raise PickError(429, f"request shed by the routing service ({h.SHED})", code="shed", scorer=scorer)


def in_subset(pool: Pool, request: LlmRequest, scorer: str) -> list[PoolEndpoint]:
    """The pool's endpoints the data plane's subset hint allows (all without a hint); 503 when it allows none."""
    if request.subset is None:
        return pool.endpoints
    allowed = set(request.subset)
    endpoints = [ep for ep in pool.endpoints if ep.address in allowed]
    if not endpoints:
        raise PickError(503, f"no endpoint available: the subset hint ({h.SUBSET}: {', '.join(request.subset) or 'empty'}) "
                             f"names no endpoint of the pool ({pool.names()})", code="no_endpoint", scorer=scorer,
                        param=h.SUBSET)
    return endpoints


def candidates(pool: Pool, request: LlmRequest, scorer: str) -> list[PoolEndpoint]:
    """Healthy endpoints serving the request's model, within the subset hint; 404 for a model nobody serves,
    503 for none up or none in the subset."""
    model = request.requested_model
    endpoints = in_subset(pool, request, scorer)
    if model and any(ep.models for ep in endpoints):
        endpoints = [ep for ep in endpoints if ep.serves(model)]
        if not endpoints:
            served = sorted({m for ep in pool.endpoints for m in ep.models})
            raise PickError(404, f"the model {model!r} is not served by this pool; served models: {', '.join(served)}",
                            code="model_not_found", scorer=scorer, param="model")
    serving = [ep for ep in endpoints if roles.decode_capable(ep.role)]  # never a prefill-only pod (llm-d.ai/role)
    if not serving:
        raise PickError(503, "no endpoint available: every endpoint allowed is prefill-only ("
                             + ", ".join(f"{ep.name}: {roles.LABEL}={ep.role}" for ep in endpoints) + ")",
                        code="no_endpoint", scorer=scorer)
    healthy = [ep for ep in serving if ep.healthy]
    if not healthy:
        raise PickError(503, f"no endpoint available: {pool.describe_down()}", code="no_endpoint", scorer=scorer)
    return healthy


class Picker:
    """Scores the healthy endpoints in-process with one scorer from the registry."""

    def __init__(self, pool: Pool, scorer: Scorer, *, shed_queue_threshold: float = 0, max_fallbacks: int = 2,
                 stages: StagePicker | None = None, saturation: Saturation | None = None,
                 objectives: Objectives | None = None, flow: dict | None = None):
        """``flow``: flow control's settings (:class:`FlowController`'s keywords), None: off."""
        self.pool = pool
        self.saturation = saturation if saturation is not None else Saturation()
        self.objectives = objectives if objectives is not None else Objectives()
        self.scorer = scorer
        self.shed_queue_threshold = shed_queue_threshold
        self.max_fallbacks = max_fallbacks
        self.stages = stages
        self.flow = None if flow is None else FlowController(self._no_room, lambda: bool(self.pool.healthy()), **flow)

    def _no_room(self) -> bool:
        """Flow control's view: the pool saturated, the picks since each endpoint's last scrape counted as waiting."""
        return self.saturation.of(self.pool.healthy(), picked=True) >= 1.0

    @property
    def scorer_name(self) -> str:
        return self.scorer.type

    async def pick(self, request: LlmRequest) -> Decision:
        if self.flow is not None and not any(name in request.headers for name in (*FORCE_HEADERS, h.SHED)):
            await self._wait_turn(request)
        return self.with_stages(self.pick_decoder(request), request)

    async def _wait_turn(self, request: LlmRequest) -> None:
        assert self.flow is not None
        try:
            await self.flow.admit(self.objectives.priority(request.headers), fairness_id(request.headers))
        except Dropped as exc:
            raise PickError(exc.status, exc.message, code=exc.reason, scorer=self.scorer_name,
                            headers={DROPPED_REASON: exc.reason}) from None

    def pick_decoder(self, request: LlmRequest) -> Decision:
        shed_by_header(request, self.scorer_name)
        decision = forced_decision(self.pool, request)
        if decision is not None:
            return decision
        pool_candidates = candidates(self.pool, request, self.scorer_name)
        self._shed_when_saturated(request, pool_candidates)
        self._shed_when_full(pool_candidates)
        pick = self.scorer.pick(request, pool_candidates)
        self.pool.note_pick(pick.endpoint)
        return Decision(endpoint=pick.endpoint, address=pick.endpoint.address, scorer=self.scorer_name,
                        reason=pick.reason, fallbacks=[ep.address for ep in pick.fallbacks[: self.max_fallbacks]],
                        details=pick.details)

    def _shed_when_saturated(self, request: LlmRequest, pool_candidates: list[PoolEndpoint]) -> None:
        priority = self.objectives.priority(request.headers)
        if not sheddable(priority) or self.flow is not None:  # flow control queues it instead
            return
        level = self.saturation.of(pool_candidates)
        if level >= 1.0:
            raise PickError(429, f"request shed: the pool is saturated ({level:.2f} of GAIE's utilization detector, "
                                 f"thresholds {self.saturation.queue_depth_threshold:g} waiting, KV cache "
                                 f"{self.saturation.kv_cache_util_threshold:g}: "
                                 f"{self.saturation.describe(pool_candidates)}) and the request is sheddable "
                                 f"({h.OBJECTIVE}: {request.headers.get(h.OBJECTIVE)}, priority {priority})",
                            code="shed", scorer=self.scorer_name)

    def _shed_when_full(self, pool_candidates: list[PoolEndpoint]) -> None:
        threshold = self.shed_queue_threshold
        if threshold > 0 and all((ep.waiting or 0) >= threshold for ep in pool_candidates):
            raise PickError(429, f"request shed: every endpoint's waiting queue is at or over {threshold:g} ("
                                 + "; ".join(f"{ep.name}: {ep.describe_load()}" for ep in pool_candidates) + ")",
                            code="shed", scorer=self.scorer_name)

    def with_stages(self, decision: Decision, request: LlmRequest) -> Decision:
        """Add the prefiller and encoders to a decoder decision (disaggregated flows only)."""
        if self.stages is None or not self.stages.active:
            return decision
        try:
            decision.stages = self.stages.pick(request)
        except PickError as exc:
            exc.scorer = exc.scorer or decision.scorer
            raise
        return decision

    def pools(self) -> list[Pool]:
        """Every pool this picker reads (the decoders', then the stage pools): what to scrape."""
        return [self.pool, *(self.stages.pools() if self.stages is not None else [])]

    async def start(self) -> None:
        watch = getattr(self.scorer, "watch", None)  # a scorer that follows the pods (kv-events-scorer) starts now
        if watch is not None:
            watch(list(self.pool.endpoints))

    async def close(self) -> None:
        if self.flow is not None:
            await self.flow.close()
        close = getattr(self.scorer, "close", None)
        if close is not None:
            close()
