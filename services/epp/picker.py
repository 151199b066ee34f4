"""Turning a request into a routing decision: forced, scored locally, or asked of the frontend.

A :class:`Decision` names the primary endpoint (what goes into the
``x-gateway-destination-endpoint`` header, which Envoy's ORIGINAL_DST cluster reads) and the
fallbacks (appended, comma-separated, to the ``envoy.lb`` dynamic metadata value, as the
Gateway API Inference Extension protocol allows). A :class:`PickError` carries the HTTP status
the client should get instead: 503 when there is no endpoint, 429 when the pool is saturated
and the request is shed, 400 when the body cannot be read.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from eppkit.observability import otel
from eppkit.services.epp.pool import Pool, PoolEndpoint
from eppkit.services.epp.protocol import ENCODERS_HEADER, PREFILLER_HEADER
from eppkit.services.epp.request import LlmRequest
from eppkit.services.epp.scorers import Scorer
from eppkit.services.epp.stages import StageError, StagePicker, StagePicks

log = logging.getLogger("epp.picker")

# Test header in the spirit of the GIE conformance suite's endpoint-selection header: a comma-separated
# list of endpoint names or addresses; the first one in the pool wins, the rest become fallbacks.
FORCE_HEADER = "x-eppkit-force-endpoint"
# Set by the body-based router in front (if any); else the body's "model" is used.
MODEL_HEADER = "x-gateway-model-name"
ROUTING_REQUEST_HEADER = "x-routing-request"


@dataclass
class Decision:
    endpoint: PoolEndpoint | None  # None only when the frontend named an address outside the pool
    address: str
    scorer: str
    reason: str
    fallbacks: list[str] = field(default_factory=list)
    worker_id: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)  # extra span attributes
    # Disaggregated flows: the prefiller / encoders chosen with the decoder (None: no stage pools).
    stages: StagePicks | None = None

    @property
    def name(self) -> str:
        return self.endpoint.name if self.endpoint is not None else self.address

    @property
    def metadata_value(self) -> str:
        return ",".join([self.address, *self.fallbacks])

    def stage_headers(self) -> tuple[dict[str, str], list[str]]:
        """(headers to set, headers to remove) that pass the prefiller and encoders on, as llm-d does."""
        if self.stages is None:
            return {}, []
        set_headers: dict[str, str] = {}
        remove: list[str] = []
        if self.stages.prefiller is not None:
            set_headers[PREFILLER_HEADER] = self.stages.prefiller.address
        else:
            remove.append(PREFILLER_HEADER)
        if self.stages.encoders:
            set_headers[ENCODERS_HEADER] = ",".join(ep.address for ep in self.stages.encoders)
        else:
            remove.append(ENCODERS_HEADER)
        return set_headers, remove


class PickError(Exception):
    def __init__(self, status: int, message: str, *, code: str, scorer: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.scorer = scorer


class Picker(Protocol):
    scorer_name: str

    async def pick(self, request: LlmRequest) -> Decision: ...

    async def close(self) -> None: ...


def forced_decision(pool: Pool, request: LlmRequest) -> Decision | None:
    """Honour ``x-eppkit-force-endpoint``; None when the header is absent."""
    value = request.headers.get(FORCE_HEADER)
    if value is None:
        return None
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    found = [ep for ep in (pool.find(w) for w in wanted) if ep is not None]
    if not found:
        raise PickError(
            503,
            f"no endpoint available: {FORCE_HEADER}={value!r} names no endpoint of the pool "
            f"({', '.join(ep.name for ep in pool.endpoints) or 'empty pool'})",
            code="no_endpoint",
            scorer="forced",
        )
    pool.note_pick(found[0])
    return Decision(
        endpoint=found[0],
        address=found[0].address,
        scorer="forced",
        reason=f"{FORCE_HEADER}: {value}",
        fallbacks=[ep.address for ep in found[1:]],
    )


def with_stages(decision: Decision, request: LlmRequest, stages: StagePicker | None) -> Decision:
    """Add the prefiller and encoders to a decoder decision (disaggregated flows only)."""
    if stages is None or not stages.active:
        return decision
    try:
        decision.stages = stages.pick(request)
    except StageError as exc:
        raise PickError(503, exc.message, code=exc.code, scorer=decision.scorer) from None
    decision.attributes.update(decision.stages.attributes())
    return decision


def no_endpoint_error(pool: Pool, scorer: str) -> PickError:
    if not pool.endpoints:
        detail = "the pool is empty"
    else:
        detail = "all endpoints are down: " + "; ".join(
            f"{ep.name} ({ep.last_error or 'down'})" for ep in pool.endpoints
        )
    return PickError(503, f"no endpoint available: {detail}", code="no_endpoint", scorer=scorer)


def requested_model(request: LlmRequest) -> str | None:
    return request.headers.get(MODEL_HEADER) or request.model


def candidates(pool: Pool, request: LlmRequest, scorer: str) -> list[PoolEndpoint]:
    """Healthy endpoints serving the request's model; 404 for a model nobody serves, 503 for none up."""
    model = requested_model(request)
    endpoints = pool.endpoints
    if model and any(ep.models for ep in endpoints):
        endpoints = [ep for ep in endpoints if ep.serves(model)]
        if not endpoints:
            served = sorted({m for ep in pool.endpoints for m in ep.models})
            raise PickError(
                404,
                f"the model {model!r} is not served by this pool; served models: {', '.join(served)}",
                code="model_not_found",
                scorer=scorer,
            )
    healthy = [ep for ep in endpoints if ep.healthy]
    if not healthy:
        raise no_endpoint_error(pool, scorer)
    return healthy


class LocalPicker:
    """Scores the healthy endpoints in-process with one of the scorers."""

    def __init__(self, pool: Pool, scorer: Scorer, *, shed_threshold: float = 0, max_fallbacks: int = 2,
                 stages: StagePicker | None = None):
        self.pool = pool
        self.scorer = scorer
        self.scorer_name = scorer.name
        self.shed_threshold = shed_threshold
        self.max_fallbacks = max_fallbacks
        self.stages = stages

    async def pick(self, request: LlmRequest) -> Decision:
        return with_stages(await self._pick_decoder(request), request, self.stages)

    async def _pick_decoder(self, request: LlmRequest) -> Decision:
        forced = forced_decision(self.pool, request)
        if forced is not None:
            return forced
        pool_candidates = candidates(self.pool, request, self.scorer_name)
        if self.shed_threshold > 0 and all((ep.waiting or 0) >= self.shed_threshold for ep in pool_candidates):
            raise PickError(
                429,
                f"request shed: every endpoint's waiting queue is at or over {self.shed_threshold:g} ("
                + "; ".join(f"{ep.name}: {ep.describe_load()}" for ep in pool_candidates)
                + ")",
                code="shed",
                scorer=self.scorer_name,
            )
        pick = self.scorer.pick(request, pool_candidates)
        self.pool.note_pick(pick.endpoint)
        return Decision(
            endpoint=pick.endpoint,
            address=pick.endpoint.address,
            scorer=self.scorer_name,
            reason=pick.reason,
            fallbacks=[ep.address for ep in pick.fallbacks[: self.max_fallbacks]],
        )

    async def close(self) -> None:
        pass


class FrontendPicker:
    """Sidecar mode: asks the frontend (``x-routing-request: true``) and relays its answer.

    The frontend tokenizes and routes; it answers ``{"worker_id", "endpoint", "token_count",
    "reason"}``. Its 4xx/5xx answers become the client's answer. A frontend that cannot be
    reached is a 503 (no decision can be made), not a crash.
    """

    scorer_name = "frontend"

    def __init__(self, pool: Pool, frontend_url: str, *, timeout_s: float = 5.0, stages: StagePicker | None = None):
        self.pool = pool
        self.frontend_url = frontend_url.rstrip("/")
        self.timeout_s = timeout_s
        self.stages = stages  # the frontend names the decoder; the EPP adds prefiller and encoders
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the keep-alive connection now, so the first request does not pay for it."""
        try:
            async with self._client().get(f"{self.frontend_url}/health") as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("frontend %s not reachable yet: %s", self.frontend_url, exc)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def pick(self, request: LlmRequest) -> Decision:
        return with_stages(await self._pick_decoder(request), request, self.stages)

    async def _pick_decoder(self, request: LlmRequest) -> Decision:
        forced = forced_decision(self.pool, request)
        if forced is not None:
            return forced
        path = request.path if request.path.startswith("/") else "/" + request.path
        headers = {"content-type": "application/json", ROUTING_REQUEST_HEADER: "true"}
        otel.inject(headers)
        url = f"{self.frontend_url}{path.split('?', 1)[0]}"
        try:
            async with self._client().post(url, data=request.body, headers=headers) as resp:
                text = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise PickError(
                503, f"no endpoint available: frontend {self.frontend_url} unreachable ({exc.__class__.__name__}: {exc})",
                code="frontend_unreachable", scorer=self.scorer_name,
            ) from None
        try:
            answer = json.loads(text) if text else {}
        except json.JSONDecodeError:
            answer = {}
        if status != 200:
            message = (answer.get("error") or {}).get("message") if isinstance(answer.get("error"), dict) else None
            raise PickError(
                status if 400 <= status < 600 else 502,
                message or f"frontend answered {status}: {text[:200]}",
                code=str((answer.get("error") or {}).get("code", "frontend_error")) if isinstance(answer.get("error"), dict) else "frontend_error",
                scorer=self.scorer_name,
            )
        address = answer.get("endpoint")
        if not isinstance(address, str) or ":" not in address:
            raise PickError(502, f"frontend answer has no endpoint: {text[:200]}", code="frontend_bad_answer", scorer=self.scorer_name)
        endpoint = self.pool.find(address)
        if endpoint is None:
            log.warning("frontend picked %s, which is not in the EPP's pool", address)
        else:
            self.pool.note_pick(endpoint)
        worker_id = answer.get("worker_id")
        return Decision(
            endpoint=endpoint,
            address=address,
            scorer=f"frontend:{answer.get('router', 'kv')}",
            reason=str(answer.get("reason", "frontend decision")),
            fallbacks=[a for a in answer.get("fallbacks", []) if isinstance(a, str)],
            worker_id=None if worker_id is None else str(worker_id),
            attributes={"frontend.token_count": int(answer.get("token_count", 0) or 0)},
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
