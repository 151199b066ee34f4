"""The mock vLLM's HTTP server: OpenAI endpoints, the request lifecycle, its spans.

One request goes: read the body (JSON, or multipart part 1) -> check it -> injected
failure? -> queue for a slot (``vllm.queue``) -> prefill (``vllm.prefill``) or, for a
decode request carrying a prefiller's ``kv_transfer_params``, KV transfer
(``vllm.kv_transfer``) -> first token written (event ``first_token``) -> multipart only:
wait for the metadata part and the closing boundary (``vllm.await_metadata``) -> decode
(``vllm.decode``) -> finish. Every step's span is started before the step's wait and
ended after it, so span times are the step's real times.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import Error, GenAi, Http, Mock, Stream, Vllm
from eppkit.services.openai_errors import OpenAIError, error_body, openai_error_middleware
from eppkit.services.openai_server import api, handshake, tokens
from eppkit.services.openai_server.ec_cache import EncoderCache
from eppkit.services.openai_server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from eppkit.services.openai_server.metrics import VllmMetrics
from eppkit.services.openai_server.responses import DONE, Renderer, usage
from eppkit.services.pod_headers import (
    BODY_SHA256_KEY,
    HEADER_POD,
    HEADER_REQUEST_ID,
    REQUEST_ID_KEY,
    pod_headers_middleware,
    response_headers,
)
from eppkit.services.vllm import multipart
from eppkit.services.vllm.clock import TokenClock
from eppkit.services.vllm.config import VllmConfig
from eppkit.services.vllm.disconnects import DisconnectWatcher, Watch
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
from eppkit.services.vllm.latency import LatencyModel, Overrides
from eppkit.services.vllm.scheduler import QueueFull, Scheduler
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger("vllm")

HEADER_TTFT = "x-mock-ttft-ms"
HEADER_ITL = "x-mock-itl-ms"
HEADER_KV_TRANSFER = "x-mock-kv-transfer-ms"
HEADER_METADATA_TIMEOUT = "x-mock-metadata-timeout-ms"
TRACER_SCOPE = "vllm.tracing.otel"  # the instrumentation scope of vLLM's own spans



class _ClientGone(Exception):
    """The client closed the connection while we were writing to it."""


@dataclass
class _Flow:
    """What one request holds while it runs (so cleanup knows what to give back)."""

    request_id: str
    span: trace.Span
    arrival: float  # time.monotonic()
    rng: random.Random
    response: web.StreamResponse | None = None
    slot: bool = False
    kv_blocks: int = 0
    first_token_at: float | None = None
    finish_reason: str | None = None
    injected: Failure | None = None
    watch: Watch | None = None
    ended_ns: int | None = None  # wall clock when the last bytes were handed to the socket


class MockVllm:
    def __init__(self, config: VllmConfig, tracer: trace.Tracer | None = None) -> None:
        self.c = config
        self.tracer = tracer or trace.get_tracer(TRACER_SCOPE)
        self.latency = LatencyModel(config)
        self.scheduler = Scheduler(config.max_num_seqs, config.max_waiting_queue_length)
        self.cache = PrefixCache(config.block_size, config.kv_cache_size)
        self.failures = FailureInjector(
            config.failure_injection_rate, config.failure_types, config.failure_after_tokens, config.seed
        )
        self.ec_cache = EncoderCache(config.ec_cache_dir) if config.ec_cache_dir else None
        self.metrics = VllmMetrics(
            config.model,
            running=lambda: self.scheduler.running,
            waiting=lambda: self.scheduler.waiting,
            kv_usage=lambda: self.cache.usage,
            block_size=config.block_size,
            num_gpu_blocks=config.kv_cache_size,
            max_model_len=config.max_model_len,
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
        app.on_startup.append(self.watcher.start)
        app.on_shutdown.append(self.watcher.cancel_all)
        app.on_cleanup.append(self.watcher.stop)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "eppkit", "root": name, "parent": None,
             "max_model_len": self.c.max_model_len, "permission": [_permission(created)]}
            for name in self.c.served_model_names
        ]
        return web.Response(body=json.dumps({"object": "list", "data": data}).encode(), content_type="application/json")

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

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
        flow = _Flow(request_id=rid, span=span, arrival=time.monotonic(), rng=random.Random(f"{self.c.seed}:{self.c.instance}:{seq}"))
        flow.watch = self.watcher.watch(request)
        try:
            return await self._run(request, kind, flow)
        except OpenAIError as exc:
            self._record_error(flow, exc.status, exc.message)
            if flow.response is not None and flow.response.prepared:
                await self._inband_error(flow, exc)
                return flow.response
            raise
        except asyncio.CancelledError:
            if flow.watch.shutdown:
                span.add_event(Vllm.SERVER_SHUTDOWN)
                span.set_status(Status(StatusCode.ERROR, "server shutting down"))
            elif flow.watch.client_gone or _transport_gone(request):
                self._record_cancel(flow)
            raise
        except _ClientGone:
            self._record_cancel(flow)
            return flow.response if flow.response is not None else web.Response(status=499)
        except _InjectedDrop:
            # the connection is closed; aiohttp's attempt to finish the response fails quietly
            return flow.response if flow.response is not None else web.Response(status=500)
        except Exception as exc:  # a bug in the mock: answer 500, keep serving, say what
            log.exception("request %s failed", rid)
            self._record_error(flow, 500, f"mock vLLM internal error: {exc!r}")
            if flow.response is not None and flow.response.prepared:
                return flow.response
            raise OpenAIError(500, f"mock vLLM internal error: {exc!r}") from exc
        finally:
            self.watcher.unwatch(flow.watch)
            if flow.slot:
                self.scheduler.release()
                flow.slot = False
            if flow.kv_blocks:
                self.cache.release(flow.kv_blocks)
                flow.kv_blocks = 0
            span.end(end_time=flow.ended_ns)

    async def _run(self, request: web.Request, kind: str, flow: _Flow) -> web.StreamResponse:
        c, span = self.c, flow.span

        # 1. the request: whole JSON body, or multipart part 1 (the body stays open)
        reader: multipart.MultipartReader | None = None
        _check_content_type(request)
        if request.content_type.startswith("multipart/"):
            reader, raw = await self._read_payload_part(request)
            span.set_attribute(Vllm.MULTIPART, True)
        else:
            raw = await self._read_body(request)
        req = api.parse_request(kind, api.parse_json(raw), c.served_model_names, c.max_model_len)
        overrides = _overrides(request.headers)
        self._request_attributes(span, req)

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
        try:
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
            await self._prepare(request, flow, req.stream)
        if req.stream:
            await self._write(flow, renderer.token_chunk(out[0], first=True))
        flow.first_token_at = time.monotonic()
        span.add_event(Stream.FIRST_TOKEN)
        ttft = flow.first_token_at - flow.arrival
        self.metrics.ttft.observe(ttft)

        # 6. multipart: the metadata part and the closing boundary, then decode
        metadata_report = None
        if reader is not None:
            metadata_report = await self._await_metadata(request, reader, flow)

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
        extra: dict[str, Any] = {}
        if prefill_only:
            extra["kv_transfer_params"] = handshake.prefill_response_params(
                instance=c.instance,
                request_id=flow.request_id,
                prompt_tokens=req.prompt_tokens,
                block_size=c.block_size,
                host=c.kv_host,
                port=c.kv_port,
            )
        else:
            extra["kv_transfer_params"] = None
        if metadata_report is not None:
            extra["multipart_metadata"] = metadata_report
        # vLLM reports the tokens a chat request put into its prefix cache (whole blocks not found there);
        # its completions leave the field null.
        created = (req.prompt_tokens // c.block_size) * c.block_size - cached if req.kind == api.CHAT else None
        use = usage(req.prompt_tokens, n_out, cached, created if created is None else max(0, created))
        e2e = time.monotonic() - flow.arrival
        self._finish_attributes(span, req, n_out, finish_reason, time_in_queue, ttft, e2e, prefill_time, decode_time)
        self.metrics.e2e.observe(e2e)
        self.metrics.prompt_tokens.inc(req.prompt_tokens)
        self.metrics.generation_tokens.inc(n_out)
        self.metrics.request_success(finished_reason=finish_reason).inc()
        self._count_tokens(req, n_out, cached, pulled=req.prompt_tokens if remote_prefill else 0,
                           inference_s=prefill_time + decode_time)

        if req.stream:
            tail = renderer.final_chunk(finish_reason, extra, last=not req.include_usage)
            if req.include_usage:
                tail += renderer.usage_chunk(use)
            await self._write_eof(flow, tail + DONE)
            return flow.response
        body = json.dumps(renderer.full("".join(out), finish_reason, use, extra)).encode()
        if flow.response is not None:  # multipart: headers went out at the first token
            await self._write_eof(flow, body)
            return flow.response
        return web.Response(body=body, content_type="application/json", headers=self._headers(flow))

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
            writer = _TokenWriter(self.clock, flow.response, request.transport, renderer, out, stop, next_gap, self.metrics.token_lateness.observe)
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

    async def _await_metadata(self, request: web.Request, reader: multipart.MultipartReader, flow: _Flow) -> dict[str, Any]:
        timeout_ms = _float_header(request.headers, HEADER_METADATA_TIMEOUT)
        if timeout_ms is None:
            timeout_ms = self.c.multipart_metadata_timeout
        span = self._child(flow.span, Vllm.AWAIT_METADATA)
        span.set_attribute(Vllm.MULTIPART_TIMEOUT_MS, timeout_ms)
        started = time.monotonic()
        try:
            try:
                parts = await asyncio.wait_for(reader.read_until_closed(), timeout_ms / 1000.0)
            except asyncio.TimeoutError:
                raise OpenAIError(
                    408,
                    f"multipart: the '{multipart.METADATA_PART}' part and the closing boundary did not arrive "
                    f"within {timeout_ms:g} ms after the first token",
                    code="metadata_timeout",
                ) from None
            except multipart.MultipartError as exc:
                if _transport_gone(request):
                    raise _ClientGone() from None
                raise OpenAIError(400, f"multipart: {exc}", code="metadata_missing") from None
            except (ConnectionResetError, web.HTTPException):
                raise _ClientGone() from None
            meta = [p for p in parts if p.name == multipart.METADATA_PART]
            if not meta:
                names = ", ".join(p.name for p in parts) or "none"
                raise OpenAIError(
                    400,
                    f"multipart: the body closed without a '{multipart.METADATA_PART}' part (parts after the payload: {names})",
                    code="metadata_missing",
                )
            waited = time.monotonic() - started
            body = meta[0].body
            try:
                value: Any = json.loads(body) if body else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                value = body.decode("utf-8", "replace")
            report = {
                "received": True,
                "content": value,
                "bytes": len(body),
                "waited_ms": round(waited * 1000.0, 3),
                "parts": [p.name for p in parts],
            }
            span.set_attribute(Vllm.MULTIPART_METADATA_BYTES, len(body))
            span.set_attribute(Vllm.MULTIPART_METADATA, body[:1024].decode("utf-8", "replace"))
            return report
        except OpenAIError as exc:
            span.set_status(Status(StatusCode.ERROR, exc.message))
            raise
        finally:
            span.end()

    async def _inject(self, request: web.Request, flow: _Flow, failure: Failure) -> None:
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
        raise _InjectedDrop()

    async def _read_payload_part(self, request: web.Request) -> tuple[multipart.MultipartReader, bytes]:
        try:
            boundary = multipart.boundary_of(request.headers.get("Content-Type", ""))
            reader = multipart.MultipartReader(request.content, boundary, max_bytes=self.c.max_body_bytes)
            part = await reader.next_part()
        except multipart.MultipartError as exc:
            status = 413 if isinstance(exc, multipart.MultipartTooLarge) else 400
            raise OpenAIError(status, f"multipart: {exc}") from None
        if part is None:
            raise OpenAIError(400, "multipart: the body closed before any part")
        if part.name != multipart.PAYLOAD_PART:
            raise OpenAIError(400, f"multipart: the first part must be '{multipart.PAYLOAD_PART}', got '{part.name}'")
        return reader, part.body

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.c.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise OpenAIError(413, f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes")
        chunks, total = [], 0
        while True:
            chunk = await request.content.readany()
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise OpenAIError(413, f"request body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        request[BODY_SHA256_KEY] = hashlib.sha256(body).hexdigest()
        return body

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

    # ---- response plumbing -----------------------------------------------------------

    def _headers(self, flow: _Flow) -> dict[str, str]:
        return {HEADER_POD: self.c.instance, HEADER_REQUEST_ID: flow.request_id}

    async def _prepare(self, request: web.Request, flow: _Flow, sse: bool) -> None:
        resp = web.StreamResponse(status=200, headers={**response_headers(request, self.c.instance),
                                                        **self._headers(flow)})
        if request.version >= (1, 1):
            # explicit, so resp.chunked is true and _TokenWriter frames its direct writes
            resp.enable_chunked_encoding()
        if sse:
            resp.content_type = "text/event-stream"
            resp.charset = "utf-8"  # as vLLM's (Starlette's) "text/event-stream; charset=utf-8"
            resp.headers["Cache-Control"] = "no-cache"
            # The first token follows at once: let aiohttp send the headers with it, one
            # send() instead of two (sends on loopback dominate the mock's CPU per request).
            resp._send_headers_immediately = False
        else:
            resp.content_type = "application/json"
        flow.response = resp
        try:
            await resp.prepare(request)
        except (ConnectionResetError, RuntimeError) as exc:
            raise _ClientGone() from exc

    async def _write(self, flow: _Flow, data: bytes) -> None:
        try:
            await flow.response.write(data)
        except ConnectionResetError as exc:  # includes aiohttp's ClientConnectionResetError
            raise _ClientGone() from exc

    async def _write_eof(self, flow: _Flow, data: bytes = b"") -> None:
        # The request is over once these bytes leave: stamp it here, not in the cleanup
        # after it, which a descheduled process can reach after Envoy's own span has ended.
        flow.ended_ns = time.time_ns()
        try:
            await flow.response.write_eof(data)
        except ConnectionResetError as exc:
            raise _ClientGone() from exc

    async def _inband_error(self, flow: _Flow, exc: OpenAIError) -> None:
        """Headers already went out (multipart/streaming): say it in the body, then end."""
        body = error_body(exc.status, exc.message, param=exc.param, code=exc.code)
        try:
            if flow.response.content_type == "text/event-stream":
                await flow.response.write(Renderer._sse(body) + DONE)
            else:
                await flow.response.write(json.dumps(body).encode())
            await flow.response.write_eof()
        except ConnectionResetError:
            pass

    # ---- spans and metrics -----------------------------------------------------------

    def _child(self, parent: trace.Span, name: str) -> trace.Span:
        return self.tracer.start_span(name, context=trace.set_span_in_context(parent))

    def _request_attributes(self, span: trace.Span, req: api.GenRequest) -> None:
        b = req.body
        attrs: dict[str, Any] = {
            GenAi.RESPONSE_MODEL: req.model,
            GenAi.USAGE_PROMPT_TOKENS: req.prompt_tokens,
            GenAi.REQUEST_N: 1,
            Vllm.STREAM: req.stream,
            Vllm.API: req.kind,
            # as vLLM: what the request may generate (the context's rest when it names no max_tokens)
            GenAi.REQUEST_MAX_TOKENS: req.max_tokens or max(0, self.c.max_model_len - req.prompt_tokens),
        }
        # as vLLM: the sampling parameters in effect (1.0 when not given), each only when not zero
        for key, attribute in (("temperature", GenAi.REQUEST_TEMPERATURE), ("top_p", GenAi.REQUEST_TOP_P)):
            value = b.get(key)
            value = 1.0 if value is None else float(value)
            if value:
                attrs[attribute] = value
        if req.media:
            attrs[Vllm.MM_ITEMS] = len(req.media)
        params = req.kv_transfer_params
        if handshake.wants_remote_decode(params):
            attrs[Vllm.KV_TRANSFER_PARAMS] = "do_remote_decode"
        elif handshake.has_remote_prefill(params):
            attrs[Vllm.KV_TRANSFER_PARAMS] = "do_remote_prefill"
        span.set_attributes(attrs)

    def _finish_attributes(self, span, req, n_out, finish_reason, queue, ttft, e2e, prefill, decode) -> None:
        span.set_attributes(
            {
                GenAi.USAGE_COMPLETION_TOKENS: n_out,
                GenAi.USAGE_NUM_SEQUENCES: 1,
                GenAi.LATENCY_TIME_IN_QUEUE: queue,
                GenAi.LATENCY_TIME_TO_FIRST_TOKEN: ttft,
                GenAi.LATENCY_E2E: e2e,
                GenAi.LATENCY_TIME_IN_MODEL_PREFILL: prefill,
                GenAi.LATENCY_TIME_IN_MODEL_DECODE: decode,
                GenAi.LATENCY_TIME_IN_MODEL_INFERENCE: prefill + decode,
                GenAi.RESPONSE_FINISH_REASONS: [finish_reason],
            }
        )

    def _count_tokens(self, req: api.GenRequest, n_out: int, cached: int, pulled: int, inference_s: float) -> None:
        """vLLM's per-request token histograms and where the prompt's KV came from: computed here, this
        instance's prefix cache, or pulled from a prefiller (vLLM's p2p KV transfer)."""
        m, computed = self.metrics, max(0, req.prompt_tokens - cached - pulled)
        m.request_prompt_tokens.observe(req.prompt_tokens)
        m.request_generation_tokens.observe(n_out)
        limit = req.max_tokens or max(0, self.c.max_model_len - req.prompt_tokens)
        m.request_max_num_generation_tokens.observe(limit)
        m.request_params_max_tokens.observe(limit)
        m.request_params_n.observe(1)
        m.request_num_preemptions.observe(0)
        m.request_prefill_kv_computed_tokens.observe(computed)
        m.inference_time.observe(inference_s)
        m.prompt_tokens_by_source(source="local_compute").inc(computed)
        m.prompt_tokens_by_source(source="local_cache_hit").inc(cached)
        m.prompt_tokens_by_source(source="external_kv_transfer").inc(pulled)
        m.prompt_tokens_cached.inc(cached + pulled)
        m.prompt_tokens_cached_by_source(source="device").inc(cached)
        m.prompt_tokens_cached_by_source(source="p2p").inc(pulled)

    def _record_error(self, flow: _Flow, status: int, message: str) -> None:
        self.metrics.request_errors(status=str(status)).inc()
        flow.span.set_status(Status(StatusCode.ERROR, message))
        flow.span.set_attribute(Error.TYPE, str(status))
        flow.span.set_attribute(Http.RESPONSE_STATUS_CODE, status)

    def _record_cancel(self, flow: _Flow) -> None:
        self.metrics.client_cancellations.inc()
        self.metrics.request_success(finished_reason="abort").inc()
        flow.span.add_event(Vllm.CLIENT_CANCELLED)
        flow.span.set_attribute(Vllm.CANCELLED, True)
        flow.span.set_attribute(GenAi.RESPONSE_FINISH_REASONS, ["abort"])
        flow.span.set_status(Status(StatusCode.ERROR, "client disconnected"))


class _TokenWriter:
    """Writes tokens ``1..stop-1`` of a stream from TokenClock callbacks.

    The first token and the final chunks go through aiohttp's ``StreamResponse.write``;
    the tokens in between are framed here (HTTP/1.1 chunked, as aiohttp frames them) and
    handed straight to the transport. That skips a coroutine switch, a future and a timer
    per token, which is what lets one process keep hundreds of streams on time.
    """

    def __init__(self, clock, response: web.StreamResponse, transport, renderer, out, stop, next_gap, observe_lateness) -> None:
        self.clock = clock
        self.observe_lateness = observe_lateness
        self.transport = transport
        self.chunked = response.chunked
        self.renderer = renderer
        self.out = out
        self.stop = stop
        self.next_gap = next_gap
        self.index = 1
        self.deadline = 0.0
        self.done: asyncio.Future | None = None

    async def run(self, base: float) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.deadline = base + self.next_gap()
        self.clock.call_at(self.deadline, self._tick)
        await self.done  # a cancelled handler cancels this future; _tick then stops

    def _tick(self) -> None:
        done = self.done
        if done.done():
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            done.set_exception(_ClientGone())
            return
        self.observe_lateness(time.monotonic() - self.deadline)
        chunk = self.renderer.token_chunk(self.out[self.index], first=False)
        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if self.chunked else chunk)
        self.index += 1
        if self.index >= self.stop:
            done.set_result(None)
            return
        self.deadline += self.next_gap()
        self.clock.call_at(self.deadline, self._tick)


def _permission(created: int) -> dict[str, Any]:
    """vLLM's model permission card (OpenAI's legacy one), as every entry of its /v1/models carries it."""
    return {"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission", "created": created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
            "group": None, "is_blocking": False}


class _InjectedDrop(Exception):
    """Raised after an injected stall/disconnect closed the connection."""


def _check_content_type(request: web.Request) -> None:
    """JSON or multipart only, as vLLM (``validate_json_request``); no Content-Type at all is let through.

    Without this a body sent as text/plain or a form was parsed as JSON anyway and served.
    """
    if "Content-Type" not in request.headers:
        return
    media = request.content_type.lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    if media.startswith("multipart/"):
        return
    raise OpenAIError(415, f"Unsupported Media Type: Only 'application/json' is allowed, got {media!r}",
                      param="Content-Type", code="unsupported_media_type")


def _transport_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _float_header(headers, name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise OpenAIError(400, f"{name} must be a number of milliseconds, got {raw!r}") from None
    if value < 0 or value != value:
        raise OpenAIError(400, f"{name} cannot be negative")
    return value


def _overrides(headers) -> Overrides:
    return Overrides(
        ttft_ms=_float_header(headers, HEADER_TTFT),
        itl_ms=_float_header(headers, HEADER_ITL),
        kv_transfer_ms=_float_header(headers, HEADER_KV_TRANSFER),
    )
