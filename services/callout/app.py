"""The callout routing service: ``POST /pick`` answers which endpoint serves a request.

This is the decision maker of the external-callout modes (``lua-callout``,
``dynmod-callout``): an Envoy filter sends it the client's raw request body and uses the
endpoint it returns. The API is fixed in docs/CONTRACTS.md ("Callout service"); the test
headers below are extras that every caller forwards (see docs/modes-callout.md).

Answers:
  200 ``{"endpoint": "host:port", "scorer": ..., "reason": ...}`` and the same endpoint in
      the ``x-gateway-destination-endpoint`` response header; in the disaggregated flows
      (``--prefill-endpoints`` / ``--encoder-endpoints``) also ``"prefiller": "host:port"``
      and, for a request with media, ``"encoders": ["host:port", ...]``, repeated in the
      response headers ``x-prefiller-host-port`` / ``x-encoder-hosts-ports`` that the caller
      copies onto the request for the pd-sidecar (as llm-d passes them)
  400 the body is not a JSON object
  429 the request was shed (``x-eppkit-shed``)
  503 no endpoint can serve it (empty pool, no endpoint for the model, forced endpoint unknown)
Every non-200 answer is OpenAI-style error JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from eppkit.observability import otel
from eppkit.services.callout.scorers import PoolEndpoint, Scorer
from eppkit.services.encoder.media import media_items
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware

DESTINATION_HEADER = "x-gateway-destination-endpoint"
MODEL_HEADER = "x-gateway-model-name"
# Test steering, as the EPP has it: pick exactly this endpoint (host:port or instance name;
# a comma-separated list means the first one that can serve the request).
FORCE_HEADER = "x-eppkit-force-endpoint"
# Test steering: shed this request (429), as a saturated pool would.
SHED_HEADER = "x-eppkit-shed"
# Disaggregated flows: what the caller copies onto the request, and the matching test steering.
PREFILLER_HEADER = "x-prefiller-host-port"
ENCODERS_HEADER = "x-encoder-hosts-ports"
FORCE_PREFILLER_HEADER = "x-eppkit-force-prefiller"
FORCE_ENCODERS_HEADER = "x-eppkit-force-encoders"
_TRUE = {"1", "true", "yes", "on"}

MAX_BODY_BYTES = 64 * 1024 * 1024  # long prompts must reach the scorer whole


@dataclass(frozen=True)
class PickLatency:
    """Time the pick takes on purpose (decision cost in comparisons), base + uniform jitter, in ms."""

    base_ms: float = 0.0
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.jitter_ms < 0:
            raise ValueError("pick-latency and pick-latency-jitter cannot be negative")
        if self.jitter_ms > 0.3 * self.base_ms:
            raise ValueError("pick-latency-jitter must be at most 30% of pick-latency")

    def sample_s(self, rng: random.Random) -> float:
        return max(0.0, self.base_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000.0


@dataclass
class StagePicks:
    """The prefiller and encoders chosen with the decoder (disaggregated flows)."""

    prefiller: PoolEndpoint | None = None
    prefill_reason: str = ""
    encoders: tuple[PoolEndpoint, ...] = ()
    encoders_reason: str = ""


def _forced(pool: list[PoolEndpoint], header: str, value: str) -> list[PoolEndpoint]:
    wanted = [w.strip() for w in value.split(",") if w.strip()]
    found = [next((ep for ep in pool if w in (ep.address, ep.name)), None) for w in wanted]
    if not wanted or any(ep is None for ep in found):
        raise OpenAIError(503, f"{header}={value!r} names no endpoint of that pool "
                               f"({', '.join(ep.name for ep in pool) or 'empty pool'})", param=header, code="no_endpoint")
    return [ep for ep in found if ep is not None]


class Picker:
    """The decision without HTTP: narrow the pool, honour the test headers, ask the scorer.

    With ``prefill`` / ``encoders`` pools (pd, epd, ttft flows) :meth:`pick_stages` also names
    the prefiller (its own scorer of the same kind) and, for a request with media, the
    encoders: one per media item at most, starting at a rotating offset.
    """

    def __init__(self, endpoints: list[PoolEndpoint], scorer: Scorer, *, prefill: list[PoolEndpoint] = (),
                 encoders: list[PoolEndpoint] = (), prefill_scorer: Scorer | None = None) -> None:
        self.endpoints = endpoints
        self.scorer = scorer
        self.prefill = list(prefill)
        self.encoders = list(encoders)
        self.prefill_scorer = prefill_scorer or type(scorer)()
        self._encoder_turn = 0

    def pick_stages(self, body: dict[str, Any], *, model: str | None, force_prefiller: str | None,
                    force_encoders: str | None) -> StagePicks:
        picks = StagePicks()
        if self.prefill:
            if force_prefiller is not None:
                picks.prefiller = _forced(self.prefill, FORCE_PREFILLER_HEADER, force_prefiller)[0]
                picks.prefill_reason = "forced"
            else:
                candidates = [ep for ep in self.prefill if not model or ep.model is None or ep.model == model]
                if not candidates:
                    raise OpenAIError(503, f"no prefill endpoint for model {model!r}", code="no_endpoint")
                picks.prefiller, picks.prefill_reason = self.prefill_scorer.pick(candidates, body)
        items = len(media_items(body))
        if self.encoders and items:
            if force_encoders is not None:
                picks.encoders = tuple(_forced(self.encoders, FORCE_ENCODERS_HEADER, force_encoders))
                picks.encoders_reason = "forced"
            else:
                turn, self._encoder_turn = self._encoder_turn, self._encoder_turn + 1
                start = turn % len(self.encoders)
                order = self.encoders[start:] + self.encoders[:start]
                picks.encoders = tuple(order[: min(items, len(order))])
                picks.encoders_reason = f"{items} media item(s), {len(picks.encoders)} of {len(order)} encoders from turn {turn}"
        return picks

    def candidates(self, model: str | None) -> list[PoolEndpoint]:
        if not model:
            return list(self.endpoints)
        return [ep for ep in self.endpoints if ep.model is None or ep.model == model]

    def pick(self, body: dict[str, Any], *, model: str | None, force: str | None, shed: bool) -> tuple[PoolEndpoint, str]:
        """Return (endpoint, reason) or raise OpenAIError 429/503."""
        if shed:
            raise OpenAIError(429, "request shed by the routing service (x-eppkit-shed)", code="shed")
        candidates = self.candidates(model)
        if not candidates:
            detail = f" for model {model!r}" if model else ""
            raise OpenAIError(503, f"no endpoint available{detail}", code="no_endpoint")
        if force:
            wanted = [w.strip() for w in force.split(",") if w.strip()]
            for want in wanted:
                for ep in candidates:
                    if want in (ep.address, ep.name):
                        return ep, "forced"
            detail = f" serving model {model!r}" if model else ""
            raise OpenAIError(
                503, f"forced endpoint {force!r} is not in the pool{detail}", param=FORCE_HEADER, code="no_endpoint"
            )
        return self.scorer.pick(candidates, body)


def make_app(
    picker: Picker,
    *,
    latency: PickLatency = PickLatency(),
    seed: int = 0,
    tracer: trace.Tracer | None = None,
) -> web.Application:
    tracer = tracer or trace.get_tracer("callout")
    rng = random.Random(seed)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "endpoints": len(picker.endpoints), "scorer": picker.scorer.name})

    async def pick(request: web.Request) -> web.Response:
        headers = request.headers
        model = headers.get(MODEL_HEADER) or None
        with tracer.start_as_current_span(
            "callout.pick", context=otel.extract(headers), kind=SpanKind.SERVER
        ) as span:
            span.set_attribute("callout.scorer", picker.scorer.name)
            if model:
                span.set_attribute("gen_ai.request.model", model)
            try:
                raw = await request.read()
                try:
                    body = json.loads(raw) if raw else None
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
                    raise OpenAIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
                if not isinstance(body, dict):
                    raise OpenAIError(400, "request body must be a JSON object", code="invalid_json")
                if latency.base_ms:
                    await asyncio.sleep(latency.sample_s(rng))
                endpoint, reason = picker.pick(
                    body,
                    model=model,
                    force=headers.get(FORCE_HEADER),
                    shed=headers.get(SHED_HEADER, "").strip().lower() in _TRUE,
                )
                stages = picker.pick_stages(body, model=model, force_prefiller=headers.get(FORCE_PREFILLER_HEADER),
                                            force_encoders=headers.get(FORCE_ENCODERS_HEADER))
            except OpenAIError as exc:
                span.set_attribute("callout.reason", exc.code or exc.message)
                span.set_attribute("http.response.status_code", exc.status)
                if exc.status >= 500:
                    span.set_status(Status(StatusCode.ERROR, exc.message))
                return exc.response()
            span.set_attribute("callout.endpoint", endpoint.address)
            span.set_attribute("callout.endpoint.name", endpoint.name)
            span.set_attribute("callout.reason", reason)
            span.set_attribute("http.response.status_code", 200)
            answer: dict[str, Any] = {"endpoint": endpoint.address, "scorer": picker.scorer.name, "reason": reason}
            out_headers = {DESTINATION_HEADER: endpoint.address}
            if stages.prefiller is not None:
                answer["prefiller"] = out_headers[PREFILLER_HEADER] = stages.prefiller.address
                span.set_attribute("callout.prefiller", stages.prefiller.address)
                span.set_attribute("callout.prefiller.name", stages.prefiller.name)
                span.set_attribute("callout.prefill.reason", stages.prefill_reason)
            if stages.encoders:
                answer["encoders"] = [ep.address for ep in stages.encoders]
                out_headers[ENCODERS_HEADER] = ",".join(answer["encoders"])
                span.set_attribute("callout.encoders", out_headers[ENCODERS_HEADER])
                span.set_attribute("callout.encoders.names", ",".join(ep.name for ep in stages.encoders))
                span.set_attribute("callout.encoders.reason", stages.encoders_reason)
            return web.json_response(answer, headers=out_headers)

    app = web.Application(middlewares=[openai_error_middleware], client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/health", health)
    app.router.add_post("/pick", pick)
    return app
