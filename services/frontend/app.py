"""The frontend's HTTP API (aiohttp): the sidecar's routing query, answered by the picker core.

``POST <any OpenAI path>`` with ``x-routing-request: true`` and the client's request body:
preprocess (tokenize, span ``frontend.tokenize``) and route (the picker core with the configured
scorer; ``kv-router-scorer`` is the Dynamo-style KV router that reads the tokens); answer

    {"worker_id": "vllm-1", "endpoint": "127.0.0.1:8002", "token_count": 42,
     "scorer": "queue-scorer", "reason": "...", "fallbacks": ["127.0.0.1:8001"]}

plus the scorer's own figures (``kv-router-scorer``: ``overlap_blocks``, ``total_blocks``).
Without the header the frontend refuses (400): in this topology inference goes through Envoy
to the workers, the frontend only answers routing queries. ``GET /health`` is 200 once up;
``GET /state`` shows the workers as the router sees them.
"""

from __future__ import annotations

import logging

from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import Frontend, GenAi, Http
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware
from eppkit.services.picker import headers as h
from eppkit.services.picker.core import Picker
from eppkit.services.picker.decision import Decision, PickError
from eppkit.services.picker.request import BadRequest, parse_request
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger("frontend")

MAX_BODY_BYTES = 8 * 1024 * 1024

PICKER_KEY = web.AppKey("picker", Picker)
TRACER_KEY = web.AppKey("tracer", trace.Tracer)


def worker_id(decision: Decision) -> str:
    """Dynamo names workers by instance id; the mock's instance name plays that part."""
    return decision.name


async def handle_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def handle_state(request: web.Request) -> web.Response:
    picker = request.app[PICKER_KEY]
    return web.json_response(
        {
            "scorer": picker.scorer_name,
            "workers": [
                {
                    "worker_id": ep.name,
                    "endpoint": ep.address,
                    "healthy": ep.healthy,
                    "waiting": ep.waiting,
                    "running": ep.running,
                    "picked_since_scrape": ep.picked_since_scrape,
                    "models": list(ep.models),
                }
                for ep in picker.pool.endpoints
            ],
        }
    )


async def handle_route(request: web.Request) -> web.Response:
    if not h.is_true(request.headers.get(h.ROUTING_REQUEST)):
        raise OpenAIError(
            400,
            f"this frontend only answers routing queries ({h.ROUTING_REQUEST}: true); "
            "send inference requests through the gateway",
            code="not_a_routing_request",
        )
    tracer = request.app[TRACER_KEY]
    picker = request.app[PICKER_KEY]
    raw = await request.read()
    with tracer.start_as_current_span(
        Frontend.ROUTE,
        context=otel.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={Http.REQUEST_METHOD: request.method, Http.URL_PATH: request.path},
    ) as span:
        try:
            llm_request = parse_request({k.lower(): v for k, v in request.headers.items()}, raw)
            if h.SUBSET in request.headers:  # the EPP passes the data plane's subset hint on
                llm_request.subset = tuple(v.strip() for v in request.headers[h.SUBSET].split(",") if v.strip())
        except BadRequest as exc:
            span.set_status(Status(StatusCode.ERROR, "invalid body"))
            raise OpenAIError(400, str(exc), code="invalid_json") from None
        if llm_request.model:
            span.set_attribute(GenAi.REQUEST_MODEL, llm_request.model)
        with tracer.start_as_current_span(Frontend.TOKENIZE) as tok_span:
            tokenized = llm_request.tokens()
            tok_span.set_attribute(Frontend.TOKEN_COUNT, tokenized.count)
        try:
            decision = await picker.pick(llm_request)
        except PickError as exc:
            span.set_status(Status(StatusCode.ERROR, exc.message))
            span.set_attribute(Http.RESPONSE_STATUS_CODE, exc.status)
            raise OpenAIError(exc.status, exc.message, param=exc.param, code=exc.code) from None
        span.set_attribute(Frontend.WORKER_ID, worker_id(decision))
        span.set_attribute(Frontend.ENDPOINT, decision.address)
        span.set_attribute(Frontend.TOKEN_COUNT, tokenized.count)
        span.set_attribute(Frontend.REASON, decision.reason)
        if "overlap_blocks" in decision.details:  # kv-router-scorer's figure
            span.set_attribute(Frontend.OVERLAP_BLOCKS, decision.details["overlap_blocks"])
        span.set_attributes(decision.prediction())
    return web.json_response(
        {
            "worker_id": worker_id(decision),
            "endpoint": decision.address,
            "token_count": tokenized.count,
            "scorer": decision.scorer,
            "reason": decision.reason,
            "fallbacks": decision.fallbacks,
            **decision.details,
        }
    )


def build_app(picker: Picker, tracer: trace.Tracer) -> web.Application:
    # The workers' own limit (the mock vLLM's --max-body-bytes default): a larger body is refused (413)
    # at once instead of being tokenized for seconds, past the EPP's frontend timeout, only to be
    # refused by the worker anyway (it showed as a 503 "frontend unreachable" for a 9 MiB prompt).
    app = web.Application(middlewares=[openai_error_middleware], client_max_size=MAX_BODY_BYTES)
    app[PICKER_KEY] = picker
    app[TRACER_KEY] = tracer
    app.router.add_get("/health", handle_health)
    app.router.add_get("/state", handle_state)
    app.router.add_post("/{tail:.*}", handle_route)
    return app
