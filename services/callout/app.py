"""The callout routing service: ``POST /pick`` answers which endpoint serves a request.

This is the decision maker of the external-callout modes (``lua-callout``, ``dynmod-callout``):
an Envoy filter sends it the client's raw request body and uses the endpoint it returns. The
decision is the picker core's (eppkit.services.picker); this module only speaks HTTP. The API is
fixed in docs/CONTRACTS.md ("Callout service"); the test headers are the core's
(eppkit.services.picker.headers), which every caller forwards (see docs/modes-callout.md).

Answers:
  200 ``{"endpoint": "host:port", "fallbacks": ["host:port", ...], "scorer": ..., "reason": ...}``
      and the endpoint then its fallbacks, comma-separated, in the ``x-gateway-destination-endpoint``
      response header (the value the caller hands Envoy); in the disaggregated flows
      (``--prefill-endpoints`` / ``--encoder-endpoints``) also ``"prefiller": "host:port"``
      and, for a request with media, ``"encoders": ["host:port", ...]``, repeated in the
      response headers ``x-prefiller-host-port`` / ``x-encoder-hosts-ports`` that the caller
      copies onto the request for the pd-sidecar (as llm-d passes them)
  400 the body is not a JSON object
  404 no endpoint serves the requested model
  429 the request was shed (``x-eppkit-shed``, or every queue over ``--shed-queue-threshold``)
  503 no endpoint can serve it (empty pool, all down, forced endpoint unknown)
Every non-200 answer is OpenAI-style error JSON.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import Callout, GenAi, Http
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware
from eppkit.services.picker import headers as h
from eppkit.services.picker.core import Picker
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.request import BadRequest, parse_request
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

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
        return web.json_response({"status": "ok", "endpoints": len(picker.pool), "scorer": picker.scorer_name})

    async def pick(request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        model = headers.get(h.MODEL) or None
        with tracer.start_as_current_span(
            Callout.PICK, context=otel.extract(request.headers), kind=SpanKind.SERVER
        ) as span:
            span.set_attribute(Callout.SCORER, picker.scorer_name)
            if model:
                span.set_attribute(GenAi.REQUEST_MODEL, model)
            try:
                raw = await request.read()
                try:
                    llm_request = parse_request(headers, raw)
                except BadRequest as exc:
                    raise PickError(400, str(exc), code="invalid_json") from None
                if llm_request.json_body is None:  # the filters call only with a body
                    raise PickError(400, "request body must be a JSON object", code="invalid_json")
                if latency.base_ms:
                    await asyncio.sleep(latency.sample_s(rng))
                decision = await picker.pick(llm_request)
            except PickError as exc:
                span.set_attribute(Callout.REASON, exc.code or exc.message)
                span.set_attribute(Http.RESPONSE_STATUS_CODE, exc.status)
                if exc.status >= 500:
                    span.set_status(Status(StatusCode.ERROR, exc.message))
                return OpenAIError(exc.status, exc.message, param=exc.param, code=exc.code).response()
            span.set_attribute(Callout.SCORER, decision.scorer)  # "forced" when a test header chose
            span.set_attribute(Callout.ENDPOINT, decision.address)
            span.set_attribute(Callout.ENDPOINT_NAME, decision.name)
            span.set_attribute(Callout.REASON, decision.reason)
            span.set_attributes(decision.prediction())
            span.set_attribute(Http.RESPONSE_STATUS_CODE, 200)
            answer: dict[str, Any] = {"endpoint": decision.address, "fallbacks": decision.fallbacks,
                                      "scorer": decision.scorer, "reason": decision.reason}
            out_headers, _ = decision.headers()
            stages = decision.stages
            if stages is not None:
                span.set_attributes(stages.attributes(Callout.DECISION))
                if stages.prefiller is not None:
                    answer["prefiller"] = stages.prefiller.address
                if stages.encoders:
                    answer["encoders"] = [ep.address for ep in stages.encoders]
            return web.json_response(answer, headers=out_headers)

    app = web.Application(middlewares=[openai_error_middleware], client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/health", health)
    app.router.add_post("/pick", pick)
    return app
