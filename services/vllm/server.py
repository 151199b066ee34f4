"""The mock vLLM's HTTP server: OpenAI endpoints, the request lifecycle, its spans.

One request goes: read the body (JSON, or multipart part 1) -> check it -> injected
failure? -> queue for a slot (``vllm.queue``) -> prefill (``vllm.prefill``) or, for a
decode request carrying a prefiller's ``kv_transfer_params``, KV transfer
(``vllm.kv_transfer``) -> first token written (event ``first_token``) -> multipart only:
wait for the metadata part and the closing boundary (``vllm.await_metadata``) -> decode
(``vllm.decode``) -> finish. Every step's span is started before the step's wait and
ended after it, so span times are the step's real times.

The request's way in (its body, its ``x-mock-*`` headers) is :mod:`~eppkit.services.vllm.request_in`, its way out
(the response, a paced stream) :mod:`~eppkit.services.vllm.reply`, what it leaves behind (span attributes, metrics)
:mod:`~eppkit.services.vllm.recording`; this module holds the lifecycle.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time

from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import GenAi, Mock, Stream, Vllm
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware
from eppkit.services.openai_server import api, handshake, tokens
from eppkit.services.openai_server.ec_cache import EncoderCache
from eppkit.services.openai_server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from eppkit.services.openai_server.metrics import NAME_PARAM as METRICS_NAME
from eppkit.services.openai_server.metrics import VllmMetrics
from eppkit.services.openai_server.responses import Renderer, usage
from eppkit.services.pod_headers import HEADER_POD, REQUEST_ID_KEY, pod_headers_middleware, received_fields
from eppkit.services.vllm import multipart, recording, reply, request_in
from eppkit.services.vllm.clock import TokenClock
from eppkit.services.vllm.config import VllmConfig
from eppkit.services.vllm.disconnects import DisconnectWatcher
from eppkit.services.vllm.failures import (
    CONTEXT_LENGTH,
    DISCONNECT,
    RATE_LIMIT,
    SERVER_ERROR,
    STALL,
    Failure,
    FailureInjector,
)
from eppkit.services.vllm.kvcache import PrefixCache
from eppkit.services.openai_server.kvevents import KvEventsConfig, ZmqPublisher
from eppkit.services.vllm.latency import LatencyModel
from eppkit.services.vllm.lora import LoraAdapters, parse_modules
from eppkit.services.vllm.models import model_list
from eppkit.services.vllm.scheduler import QueueFull, Scheduler
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger("vllm")

TRACER_SCOPE = "vllm.tracing.otel"  # the instrumentation scope of vLLM's own spans



class MockVllm:
    def __init__(self, config: VllmConfig, tracer: trace.Tracer | None = None) -> None:
        self.c = config
        self.tracer = tracer or trace.get_tracer(TRACER_SCOPE)
        self.latency = LatencyModel(config)
        self.scheduler = Scheduler(config.max_num_seqs, config.max_waiting_queue_length)
        # vLLM's KV events (--kv-events-config): the publisher binds at app start, the cache tells it every change.
        self.kv_events = KvEventsConfig.parse(config.kv_events_config)
        self.publisher: ZmqPublisher | None = None
        self.cache = PrefixCache(config.block_size, config.kv_cache_size, on_events=self._publish)
        self.failures = FailureInjector(
            config.failure_injection_rate, config.failure_types, config.failure_after_tokens, config.seed
        )
        self.lora = LoraAdapters(parse_modules(config.lora_modules), config.max_loras)  # --lora-modules
        self.ec_cache = EncoderCache(config.ec_cache_dir) if config.ec_cache_dir else None
        self.metrics = VllmMetrics(
            config.model,
            running=lambda: self.scheduler.running,
            waiting=lambda: self.scheduler.waiting + self.lora.blocked,
            kv_usage=lambda: self.cache.usage,
            block_size=config.block_size,
            num_gpu_blocks=config.kv_cache_size,
            max_model_len=config.max_model_len,
            lora=self.lora.info,
        )
        self.watcher = DisconnectWatcher()
        self.clock = TokenClock()
        self._seq = itertools.count()
        self._pod_headers = {HEADER_POD: config.instance}

    # ---- app -------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(
            middlewares=[pod_headers_middleware(self.c.instance), openai_error_middleware],
            client_max_size=self.c.max_body_bytes,
        )
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics_handler)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.on_startup.append(self.watcher.start)
        app.on_startup.append(self._start_kv_events)
        app.on_shutdown.append(self.watcher.cancel_all)
        app.on_cleanup.append(self.watcher.stop)
        app.on_cleanup.append(self._stop_kv_events)
        return app

    async def _start_kv_events(self, app: web.Application) -> None:
        if self.kv_events.enabled:
            self.publisher = ZmqPublisher(self.kv_events)
            log.info("KV events on %s (topic %r, %s)", self.kv_events.endpoint, self.kv_events.topic,
                     self.kv_events.event_format)
            self.cache.clear()  # a (re)started engine holds nothing: its first batch says so (AllBlocksCleared)

    async def _stop_kv_events(self, app: web.Application) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None

    def _publish(self, events) -> None:
        if self.publisher is not None:
            self.publisher.publish(events)

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's POST /reset_prefix_cache: every block out (AllBlocksCleared)."""
        self.cache.clear()
        return web.Response(text="")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        listing = model_list(self.c.served_model_names, self.c.max_model_len, self.lora.paths)
        return web.Response(body=json.dumps(listing).encode(), content_type="application/json")

    async def metrics_handler(self, request: web.Request) -> web.Response:
        body = self.metrics.render(request.query.getall(METRICS_NAME, []))  # ?name[]=: those samples only
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, api.CHAT)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, api.COMPLETION)

    # ---- one request -----------------------------------------------------------------

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        rid = request[REQUEST_ID_KEY]
        span = self.tracer.start_span(
            Vllm.REQUEST,
            context=otel.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes={Vllm.ROLE: self.c.role, Vllm.INSTANCE: self.c.instance, GenAi.REQUEST_ID: rid},
        )
        seq = next(self._seq)
        flow = reply.Flow(request_id=rid, span=span, arrival=time.monotonic(), rng=random.Random(f"{self.c.seed}:{self.c.instance}:{seq}"))
        flow.watch = self.watcher.watch(request)
        try:
            return await self._run(request, kind, flow)
        except OpenAIError as exc:  # said with what the mock received of the body (pod_headers.received_fields)
            recording.record_error(self.metrics, flow, exc.status, exc.message)
            if flow.response is not None and flow.response.prepared:
                await reply.inband_error(flow, exc, received_fields(request))
                return flow.response
            return exc.response(extra=received_fields(request))
        except asyncio.CancelledError:
            if flow.watch.shutdown:
                span.add_event(Vllm.SERVER_SHUTDOWN)
                span.set_status(Status(StatusCode.ERROR, "server shutting down"))
            elif flow.watch.client_gone or request_in.transport_gone(request):
                recording.record_cancel(self.metrics, flow)
            raise
        except reply.ClientGone:
            recording.record_cancel(self.metrics, flow)
            return flow.response if flow.response is not None else web.Response(status=499)
        except reply.InjectedDrop:
            # the connection is closed; aiohttp's attempt to finish the response fails quietly
            return flow.response if flow.response is not None else web.Response(status=500)
        except Exception as exc:  # a bug in the mock: answer 500, keep serving, say what
            log.exception("request %s failed", rid)
            recording.record_error(self.metrics, flow, 500, f"mock vLLM internal error: {exc!r}")
            if flow.response is not None and flow.response.prepared:
                return flow.response
            return OpenAIError(500, f"mock vLLM internal error: {exc!r}").response(extra=received_fields(request))
        finally:
            self.watcher.unwatch(flow.watch)
            if flow.slot:
                self.scheduler.release()
                flow.slot = False
            if flow.lora is not None:
                flow.lora.close()
            if flow.kv_blocks:
                self.cache.release(flow.kv_blocks)
                flow.kv_blocks = 0
            span.end(end_time=flow.ended_ns)

    async def _run(self, request: web.Request, kind: str, flow: reply.Flow) -> web.StreamResponse:
        c, span = self.c, flow.span

        # 1. the request: whole JSON body, or multipart part 1 (the body stays open)
        reader: multipart.MultipartReader | None = None
        request_in.check_content_type(request)
        if request.content_type.startswith("multipart/"):
            reader, raw = await request_in.read_payload_part(request, self.c.max_body_bytes)
            span.set_attribute(Vllm.MULTIPART, True)
        else:
            raw = await request_in.read_body(request, self.c.max_body_bytes)
        req = api.parse_request(kind, api.parse_json(raw), [*c.served_model_names, *self.lora.paths], c.max_model_len)
        overrides = request_in.overrides(request.headers)
        recording.request_attributes(span, req, self.c.max_model_len)

        # 2. injected failures that answer at once
        try:
            failure = self.failures.choose(request.headers)
        except ValueError as exc:
            raise OpenAIError(400, str(exc)) from None
        if failure is not None:
            flow.injected = failure
            self.metrics.injected_failures(type=failure.kind).inc()
            span.set_attribute(Mock.FAILURE, failure.kind)
            span.add_event(Mock.FAILURE_INJECTED, {Mock.FAILURE: failure.kind, Mock.FAILURE_SOURCE: failure.source})
            if failure.kind == SERVER_ERROR:
                raise OpenAIError(500, "injected failure: internal server error", code="server_error")
            if failure.kind == RATE_LIMIT:
                raise OpenAIError(429, "injected failure: rate limit exceeded", code="rate_limit_exceeded")
            if failure.kind == CONTEXT_LENGTH:
                # ask for one token more than the window holds, as a too-long request would
                raise api.context_length_error(req.prompt_tokens, max(1, c.max_model_len + 1 - req.prompt_tokens), c.max_model_len)

        # 3. queue
        queue_span = self._child(span, Vllm.QUEUE)
        queue_start = time.monotonic()
        flow.lora = self.lora.use(req.model)  # a request on an adapter waits for it to be loaded (lora.py)
        try:
            if flow.lora is not None:
                await flow.lora.load()
            await self.scheduler.acquire()
        except QueueFull as exc:
            self.metrics.admission_rejections(reason="max_num_queued_reqs").inc()
            queue_span.set_status(Status(StatusCode.ERROR, str(exc)))
            queue_span.end()
            raise OpenAIError(429, f"the mock vLLM is overloaded: {exc}", code="queue_full") from None
        except BaseException:
            queue_span.end()
            raise
        flow.slot = True
        if flow.lora is not None:
            flow.lora.run()
        queue_span.set_attribute(Vllm.NUM_REQUESTS_RUNNING, self.scheduler.running)
        queue_span.end()
        time_in_queue = time.monotonic() - queue_start
        self.metrics.queue_time.observe(time_in_queue)
        running = self.scheduler.running

        # 4. prefill, or KV transfer for a decode request with a remote prefill
        params = req.kv_transfer_params
        prefill_only = handshake.wants_remote_decode(params)
        remote_prefill = handshake.has_remote_prefill(params)
        n_out = 1 if prefill_only else self._output_length(req)
        cached = 0
        step_start = time.monotonic()
        if remote_prefill:
            kv_span = self._child(span, Vllm.KV_TRANSFER)
            kv_span.set_attribute(Vllm.KV_REMOTE_ENGINE_ID, str(params.get("remote_engine_id")))
            kv_span.set_attribute(Vllm.KV_REMOTE_HOST, str(params.get("remote_host")))
            kv_span.set_attribute(Vllm.KV_REMOTE_PORT, int(params.get("remote_port")))
            kv_span.set_attribute(Vllm.KV_NUM_BLOCKS, len(params.get("remote_block_ids") or []))
            kv_span.set_attribute(Vllm.KV_PROMPT_TOKENS, req.prompt_tokens)
            ms = self.latency.kv_transfer_ms(req.prompt_tokens, flow.rng, running=running, override=overrides.kv_transfer_ms)
            try:
                await asyncio.sleep(ms / 1000.0)
            finally:
                kv_span.end()
            self.cache.insert(req.prompt_token_list)  # the pulled blocks are now local
            self.metrics.external_prefix_cache_queries.inc(req.prompt_tokens)
            self.metrics.external_prefix_cache_hits.inc(req.prompt_tokens)
        else:
            cached = self.cache.cached_tokens(req.prompt_token_list)
            self.metrics.prefix_cache_queries.inc(req.prompt_tokens)
            self.metrics.prefix_cache_hits.inc(cached)
            hits, misses = self._ec_lookup(req)
            prefill_span = self._child(span, Vllm.PREFILL)
            prefill_span.set_attribute(Vllm.PREFILL_UNCACHED_TOKENS, req.prompt_tokens - cached)
            prefill_span.set_attribute(Vllm.PREFIX_CACHED_TOKENS, cached)
            if req.media:
                prefill_span.set_attribute(Vllm.EC_CACHE_HITS, hits)
                prefill_span.set_attribute(Vllm.EC_CACHE_MISSES, misses)
            ms = self.latency.prefill_ms(
                req.prompt_tokens - cached, flow.rng, running=running, ec_misses=misses, override=overrides.ttft_ms
            )
            prefill_span.set_attribute(Vllm.PREFILL_CONFIGURED_MS, ms)
            try:
                await asyncio.sleep(ms / 1000.0)
            finally:
                prefill_span.end()
            self.cache.insert(req.prompt_token_list)
        prefill_time = time.monotonic() - step_start
        self.metrics.prefill_time.observe(prefill_time)
        flow.kv_blocks = self.cache.blocks_for(req.prompt_tokens + n_out)
        self.cache.acquire(flow.kv_blocks)

        # 5. the first token
        seed = req.seed if req.seed is not None else c.seed
        out = tokens.output_tokens(seed, req.prompt, n_out)
        renderer = Renderer(kind, flow.request_id, req.model)
        stream_now = req.stream or reader is not None
        injected = flow.injected if flow.injected and flow.injected.kind in (STALL, DISCONNECT) else None
        if injected is not None and injected.after_tokens == 0:
            await self._inject(request, flow, injected)
        if stream_now:
            await reply.prepare(request, flow, req.stream, self.c.instance)
        if req.stream:
            await reply.write(flow, renderer.token_chunk(out[0], first=True))
        flow.first_token_at = time.monotonic()
        span.add_event(Stream.FIRST_TOKEN)
        ttft = flow.first_token_at - flow.arrival
        self.metrics.ttft.observe(ttft)

        # 6. multipart: the metadata part and the closing boundary, then decode
        metadata_report = None
        if reader is not None:
            metadata_report = await request_in.await_metadata(request, reader, self._child(flow.span, Vllm.AWAIT_METADATA),
                                                                 self.c.multipart_metadata_timeout)

        # 7. decode
        decode_start = time.monotonic()
        if not prefill_only:
            decode_span = self._child(span, Vllm.DECODE)
            decode_span.set_attribute(Vllm.DECODE_TOKENS, n_out)
            try:
                await self._decode(request, flow, renderer, out, running, overrides, req.stream, injected)
            finally:
                decode_span.end()
        elif injected is not None and injected.after_tokens >= 1:
            await self._inject(request, flow, injected)
        decode_time = time.monotonic() - decode_start
        self.metrics.decode_time.observe(decode_time)

        # 8. finish
        finish_reason = "length" if (prefill_only or req.max_tokens is not None) else "stop"
        flow.finish_reason = finish_reason
        kv_params = handshake.prefill_response_params(
            instance=c.instance, request_id=flow.request_id, prompt_tokens=req.prompt_tokens,
            block_size=c.block_size, host=c.kv_host, port=c.kv_port) if prefill_only else None
        # vLLM reports the tokens a chat request put into its prefix cache (whole blocks not found there);
        # its completions leave the field null.
        created = (req.prompt_tokens // c.block_size) * c.block_size - cached if req.kind == api.CHAT else None
        use = usage(req.prompt_tokens, n_out, cached, created if created is None else max(0, created))
        e2e = time.monotonic() - flow.arrival
        recording.finish_attributes(span, req, n_out, finish_reason, time_in_queue, ttft, e2e, prefill_time, decode_time)
        self.metrics.e2e.observe(e2e)
        self.metrics.prompt_tokens.inc(req.prompt_tokens)
        self.metrics.generation_tokens.inc(n_out)
        self.metrics.request_success(finished_reason=finish_reason).inc()
        recording.count_tokens(self.metrics, self.c.max_model_len, req, n_out, cached, pulled=req.prompt_tokens if remote_prefill else 0,
                           inference_s=prefill_time + decode_time)
        extra = reply.extra_fields(request, kv_params, metadata_report)
        return await reply.finish(flow, renderer, req, out, use, extra, self.c.instance)

    # ---- steps -----------------------------------------------------------------------

    async def _decode(self, request, flow, renderer, out, running, overrides, stream, injected) -> None:
        """Tokens 2..n on their absolute deadlines; an injected stall/disconnect cuts in."""
        # Token 2 is due one gap after token 1, or after decoding could start (multipart:
        # once the metadata arrived); every later token one gap after the previous deadline.
        base = max(flow.first_token_at, time.monotonic())
        n = len(out)
        stop = min(injected.after_tokens, n) if injected is not None else n  # tokens written in all

        observe = self.metrics.inter_token_latency.observe

        def next_gap() -> float:
            gap = self.latency.inter_token_ms(flow.rng, running=running, override=overrides.itl_ms) / 1000.0
            observe(gap)
            return gap

        if stream and stop > 1:
            writer = reply.TokenWriter(self.clock, flow.response, request.transport, renderer, out, stop, next_gap, self.metrics.token_lateness.observe)
            await writer.run(base)
            deadline = writer.deadline
        else:
            deadline = base + sum(next_gap() for _ in range(1, stop))
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if injected is not None:
            await self._inject(request, flow, injected)
        if n > 1:
            self.metrics.tpot.observe((deadline - base) / (n - 1))

    async def _inject(self, request: web.Request, flow: reply.Flow, failure: Failure) -> None:
        """A stall (hang, then drop) or a disconnect (close the connection) at this point."""
        if failure.kind == STALL:
            flow.span.add_event(Vllm.STALL_STARTED)
            await asyncio.sleep(self.c.stall_timeout / 1000.0)
        flow.span.add_event(Vllm.INJECTED_DISCONNECT)
        flow.span.set_status(Status(StatusCode.ERROR, f"injected {failure.kind}"))
        self.watcher.unwatch(flow.watch)
        if flow.response is not None and flow.response.prepared:
            # let what was written reach the client, then close without the final chunk
            await asyncio.sleep(0)
        transport = request.transport
        if transport is not None:
            transport.close()
        raise reply.InjectedDrop()

    def _ec_lookup(self, req: api.GenRequest) -> tuple[int, int]:
        if not req.media:
            return 0, 0
        self.metrics.mm_cache_queries.inc(len(req.media))
        if self.ec_cache is None:
            return 0, len(req.media)
        hits = sum(1 for item in req.media if self.ec_cache.contains(item.hash))
        self.metrics.mm_cache_hits.inc(hits)
        return hits, len(req.media) - hits

    def _output_length(self, req: api.GenRequest) -> int:
        if req.max_tokens is not None:
            return req.max_tokens
        room = self.c.max_model_len - req.prompt_tokens
        return max(1, min(self.c.default_max_tokens, room))

    def _child(self, parent: trace.Span, name: str) -> trace.Span:
        return self.tracer.start_span(name, context=trace.set_span_in_context(parent))


