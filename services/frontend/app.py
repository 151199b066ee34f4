"""The frontend's HTTP API (aiohttp).

``POST <any OpenAI path>`` with ``x-routing-request: true`` and the client's request body:
preprocess (tokenize) and route; answer

    {"worker_id": "vllm-1", "endpoint": "127.0.0.1:8002", "token_count": 42,
     "overlap_blocks": 2, "total_blocks": 2, "router": "kv", "reason": "..."}

Without the header the frontend refuses (400): in this topology inference goes through Envoy
to the workers, the frontend only answers routing queries. ``GET /health`` is 200 once up;
``GET /state`` shows the workers as the router sees them.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from eppkit.observability import otel
from eppkit.services.epp.pool import Pool
from eppkit.services.frontend.router import KvRouter, NoWorker
from eppkit.services.frontend.tokenizer import tokenize
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware

log = logging.getLogger("frontend")

ROUTING_REQUEST_HEADER = "x-routing-request"
MAX_BODY_BYTES = 8 * 1024 * 1024

POOL_KEY = web.AppKey("pool", Pool)
ROUTER_KEY = web.AppKey("router", KvRouter)
TRACER_KEY = web.AppKey("tracer", trace.Tracer)


async def handle_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def handle_state(request: web.Request) -> web.Response:
    pool = request.app[POOL_KEY]
    return web.json_response(
        {
            "router": request.app[ROUTER_KEY].name,
            "workers": [
                {
                    "worker_id": KvRouter.worker_id(ep),
                    "endpoint": ep.address,
                    "healthy": ep.healthy,
                    "waiting": ep.waiting,
                    "running": ep.running,
                    "picked_since_scrape": ep.picked_since_scrape,
                    "models": list(ep.models),
                }
                for ep in pool.endpoints
            ],
        }
    )


async def handle_route(request: web.Request) -> web.Response:
    if request.headers.get(ROUTING_REQUEST_HEADER, "").lower() != "true":
        raise OpenAIError(
            400,
            f"this frontend only answers routing queries ({ROUTING_REQUEST_HEADER}: true); "
            "send inference requests through the gateway",
            code="not_a_routing_request",
        )
    tracer = request.app[TRACER_KEY]
    router = request.app[ROUTER_KEY]
    raw = await request.read()
    with tracer.start_as_current_span(
        "frontend.route",
        context=otel.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method, "url.path": request.path},
    ) as span:
        try:
            body = json.loads(raw) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            span.set_status(Status(StatusCode.ERROR, "invalid body"))
            raise OpenAIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(body, dict):
            span.set_status(Status(StatusCode.ERROR, "invalid body"))
            raise OpenAIError(400, "request body must be a JSON object", code="invalid_json")
        model = body.get("model") if isinstance(body.get("model"), str) else None
        if model:
            span.set_attribute("gen_ai.request.model", model)
        with tracer.start_as_current_span("frontend.tokenize") as tok_span:
            tokenized = tokenize(body)
            tok_span.set_attribute("frontend.token_count", tokenized.count)
        try:
            route = router.route(tokenized.tokens, model)
        except NoWorker as exc:
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            span.set_attribute("http.response.status_code", 503)
            raise OpenAIError(503, str(exc), code="no_endpoint") from None
        span.set_attribute("frontend.worker_id", route.worker_id)
        span.set_attribute("frontend.endpoint", route.worker.address)
        span.set_attribute("frontend.token_count", tokenized.count)
        span.set_attribute("frontend.overlap_blocks", route.overlap_blocks)
        span.set_attribute("frontend.reason", route.reason)
    return web.json_response(
        {
            "worker_id": route.worker_id,
            "endpoint": route.worker.address,
            "token_count": tokenized.count,
            "overlap_blocks": route.overlap_blocks,
            "total_blocks": route.total_blocks,
            "router": router.name,
            "reason": route.reason,
        }
    )


def build_app(pool: Pool, router: KvRouter, tracer: trace.Tracer) -> web.Application:
    # The workers' own limit (the mock vLLM's --max-body-bytes default): a larger body is refused (413)
    # at once instead of being tokenized for seconds, past the EPP's frontend timeout, only to be
    # refused by the worker anyway (it showed as a 503 "frontend unreachable" for a 9 MiB prompt).
    app = web.Application(middlewares=[openai_error_middleware], client_max_size=MAX_BODY_BYTES)
    app[POOL_KEY] = pool
    app[ROUTER_KEY] = router
    app[TRACER_KEY] = tracer
    app.router.add_get("/health", handle_health)
    app.router.add_get("/state", handle_state)
    app.router.add_post("/{tail:.*}", handle_route)
    return app
