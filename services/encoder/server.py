"""The mock encoder: encodes each media item of a chat request, fills the encoder cache.

One ``encoder.encode`` span per item (attributes ``mm.type``, ``mm.hash``), parented on
the caller's W3C context, items encoded one after another. Each item's entry is written to
``--ec-cache-dir`` under its hash, so a prefill or PD mock given the same directory sees a
cache hit. The answer is what vLLM's encoder instance gives the EPD proxy: a 1-token chat
completion (plus ``mm_hashes``, non-standard, listing what was cached).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time

from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import Encoder, GenAi, Media, Mock
from eppkit.services.encoder.config import EncoderConfig
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware
from eppkit.services.openai_server import api
from eppkit.services.openai_server.ec_cache import EncoderCache
from eppkit.services.openai_server.jitter import jittered
from eppkit.services.openai_server.media import media_kind
from eppkit.services.openai_server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from eppkit.services.openai_server.metrics import NAME_PARAM as METRICS_NAME
from eppkit.services.openai_server.metrics import E2E_BUCKETS, MetricSet
from eppkit.services.openai_server.responses import DONE, Renderer, usage
from eppkit.services.pod_headers import HEADER_POD, HEADER_REQUEST_ID, REQUEST_ID_KEY, pod_headers_middleware
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

HEADER_ENCODE_MS = "x-mock-encode-ms"
HEADER_FAILURE = "x-mock-failure"


class MockEncoder:
    def __init__(self, config: EncoderConfig, tracer: trace.Tracer | None = None) -> None:
        self.c = config
        self.tracer = tracer or trace.get_tracer("encoder")
        self.cache = EncoderCache(config.ec_cache_dir) if config.ec_cache_dir else None
        self._seq = itertools.count()
        self.metric_set = MetricSet({"engine": "0", "model_name": config.model})
        self.items_total = self.metric_set.counter("eppkit_mock_encoder_items_total", "Media items encoded, by type (mock only).", "type")
        self.requests_total = self.metric_set.counter("eppkit_mock_encoder_requests_total", "Encode requests answered, by status (mock only).", "status")
        self.encode_seconds = self.metric_set.histogram("eppkit_mock_encoder_item_seconds", "Encode time per item in seconds (mock only).",
                                                        (0.001, 0.01, 0.05, 0.1) + E2E_BUCKETS)

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[pod_headers_middleware(self.c.instance, self._count_errors), openai_error_middleware],
                              client_max_size=self.c.max_body_bytes)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    def _count_errors(self, resp: web.StreamResponse) -> None:
        if resp.status >= 400:
            self.requests_total(status=str(resp.status)).inc()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": n, "object": "model", "created": int(time.time()), "owned_by": "eppkit"} for n in self.c.served_model_names]
        return web.json_response({"object": "list", "data": data})

    async def metrics(self, request: web.Request) -> web.Response:
        body = self.metric_set.render(request.query.getall(METRICS_NAME, []))  # ?name[]=: those samples only
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        rid = request[REQUEST_ID_KEY]
        if request.content_length is not None and request.content_length > self.c.max_body_bytes:
            raise OpenAIError(413, f"request body of {request.content_length} bytes exceeds the limit of {self.c.max_body_bytes} bytes")
        raw = await request.read()
        req = api.parse_request(api.CHAT, api.parse_json(raw), self.c.served_model_names, max_model_len=1 << 30)
        forced = (request.headers.get(HEADER_FAILURE) or "").strip().lower()
        if forced in ("500", "server_error", "429", "rate_limit"):
            error = (OpenAIError(500, "injected failure: internal server error", code="server_error")
                     if forced in ("500", "server_error") else
                     OpenAIError(429, "injected failure: rate limit exceeded", code="rate_limit_exceeded"))
            # The refusal is a step of the request's trace too: one failed encoder.encode per item.
            for index, item in enumerate(req.media):
                span = self.tracer.start_span(Encoder.ENCODE, context=otel.extract(request.headers))
                span.set_attribute(Media.TYPE, media_kind(item.type))
                span.set_attribute(Media.INDEX, index)
                span.set_attribute(Encoder.INSTANCE, self.c.instance)
                span.set_attribute(GenAi.REQUEST_ID, rid)
                span.set_attribute(Mock.FAILURE, str(error.status))
                span.add_event(Mock.FAILURE_INJECTED, {Mock.FAILURE: str(error.status), Mock.FAILURE_SOURCE: "header"})
                span.set_status(Status(StatusCode.ERROR, error.message))
                span.end()
            raise error
        override_ms = api.ms_header(request.headers, HEADER_ENCODE_MS)

        parent = otel.extract(request.headers)
        rng = random.Random(f"{self.c.seed}:{self.c.instance}:{next(self._seq)}")
        for index, item in enumerate(req.media):
            span = self.tracer.start_span(Encoder.ENCODE, context=parent)
            span.set_attribute(Media.TYPE, media_kind(item.type))
            span.set_attribute(Media.HASH, item.hash)
            span.set_attribute(Media.INDEX, index)
            span.set_attribute(Media.SIZE_BYTES, item.size_bytes)
            span.set_attribute(Encoder.INSTANCE, self.c.instance)
            span.set_attribute(GenAi.REQUEST_ID, rid)
            hit = self.cache.contains(item.hash) if self.cache else False
            span.set_attribute(Encoder.CACHE_HIT, hit)
            try:
                if override_ms is not None:
                    ms = override_ms
                else:
                    ms = jittered(self.c.encode_latency, self.c.encode_latency_std_dev, rng)
                    ms += self.c.encode_time_per_kb * item.size_bytes / 1024.0
                span.set_attribute(Encoder.CONFIGURED_MS, ms)
                started = time.monotonic()
                await asyncio.sleep(ms / 1000.0)
                if self.cache is not None:
                    self.cache.put(item.hash, {"type": item.type, "instance": self.c.instance, "size_bytes": item.size_bytes, "request_id": rid})
                self.items_total(type=media_kind(item.type)).inc()
                self.encode_seconds.observe(time.monotonic() - started)
            except asyncio.CancelledError:
                span.set_status(Status(StatusCode.ERROR, "cancelled"))
                raise
            finally:
                span.end()

        out = ["<ec>"]  # one token, like max_tokens=1 on a real encoder instance
        renderer = Renderer(api.CHAT, rid, req.model)
        use = usage(req.prompt_tokens, 1, 0)
        extra = {"mm_hashes": [item.hash for item in req.media]}
        headers = {HEADER_POD: self.c.instance, HEADER_REQUEST_ID: rid}
        self.requests_total(status="200").inc()
        if req.stream:
            resp = web.StreamResponse(headers=headers)
            resp.content_type = "text/event-stream"
            await resp.prepare(request)
            data = renderer.token_chunk(out[0], first=True) + renderer.final_chunk("length", extra)
            if req.include_usage:
                data += renderer.usage_chunk(use)
            await resp.write(data + DONE)
            await resp.write_eof()
            return resp
        body = renderer.full(out[0], "length", use, extra)
        return web.Response(body=json.dumps(body).encode(), content_type="application/json", headers=headers)
