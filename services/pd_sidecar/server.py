"""The disaggregation sidecar: E -> P -> D in front of a decode instance, optional first-token streaming.

Placed as llm-d places its routing sidecar: Envoy routes the request to the sidecar of the
chosen decoder; the picker passes the prefiller as ``x-prefiller-host-port`` and the
encoders as ``x-encoder-hosts-ports`` (comma separated). Without those headers the
sidecar falls back to its own ``--prefill-endpoints`` / ``--encoder-endpoints`` (round robin).
The headers may only name endpoints of those lists (llm-d's routing sidecar keeps an allowlist
for the same reason): anything else, a path or a query after a listed ``host:port`` included, is a
400 naming the header and nothing is called.

Spans (service ``pd-sidecar``): ``pd.request`` > ``pd.encode`` (one per media item),
``pd.prefill``, ``pd.decode``; ``pd.true_ttft_ms`` is the time from the request's arrival
to the first token written to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from eppkit.observability import otel
from eppkit.observability.contract import GenAi, Http, Media, Pd
from eppkit.services.openai_errors import OpenAIError, openai_error_middleware, upstream_message
from eppkit.services.openai_server.api import parse_json
from eppkit.services.openai_server.media import MediaError, check_media, media_kind
from eppkit.services.pd_sidecar import requests as derive
from eppkit.services.picker import headers
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

HEADER_PREFILLER, HEADER_ENCODERS = headers.PREFILLER, headers.ENCODERS  # set by the picker (llm-d's names)
HEADER_REQUEST_ID = "x-request-id"
# Test steering: x-mock-<target>-<knob> on the client's request reaches that target as x-mock-<knob>.
MOCK_TARGETS = ("encoder", "prefill", "decode")
# Hop-by-hop and length headers are not copied from an upstream answer to ours.
_SKIP_RESPONSE_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding", "date", "server"}


@dataclass
class SidecarConfig:
    decode_url: str
    prefill_endpoints: list[str] = field(default_factory=list)
    encoder_endpoints: list[str] = field(default_factory=list)
    stream_first_token: bool = False
    disable_prefill: bool = False
    decode_instance: str = ""  # the decoder's name, for x-inference-pod when we answer before it does
    request_timeout_s: float = 300.0
    max_body_bytes: int = 32 * 1024 * 1024


class _RoundRobin:
    def __init__(self, items: list[str]):
        self.items = items
        self._it = itertools.cycle(items) if items else None

    def next(self) -> str | None:
        return next(self._it) if self._it else None


class PdSidecar:
    def __init__(self, config: SidecarConfig, tracer: trace.Tracer | None = None):
        self.c = config
        self.tracer = tracer or trace.get_tracer("pd-sidecar")
        self._prefill_rr = _RoundRobin(config.prefill_endpoints)
        self._encoder_offset = itertools.count()
        self._session: aiohttp.ClientSession | None = None

    # -- app ----------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[openai_error_middleware], client_max_size=self.c.max_body_bytes)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.c.request_timeout_s, sock_connect=5),
            connector=aiohttp.TCPConnector(limit=0),
        )

    async def _close(self, app) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None
        return self._session

    # -- health and models ---------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        """Healthy only when the decoder and every configured prefiller and encoder are."""
        targets = {"decode": self.c.decode_url}
        targets.update({f"prefill {ep}": f"http://{ep}" for ep in self.c.prefill_endpoints})
        targets.update({f"encoder {ep}": f"http://{ep}" for ep in self.c.encoder_endpoints})

        async def probe(url: str) -> str:
            try:
                async with self.session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    return "ok" if resp.status == 200 else f"HTTP {resp.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return f"unreachable ({type(exc).__name__})"

        results = dict(zip(targets, await asyncio.gather(*(probe(u) for u in targets.values()))))
        status = 200 if all(v == "ok" for v in results.values()) else 503
        return web.json_response({"status": "ok" if status == 200 else "degraded", "components": results}, status=status)

    async def models(self, request: web.Request) -> web.Response:
        async with self.session.get(self.c.decode_url + "/v1/models") as resp:
            return web.Response(body=await resp.read(), status=resp.status, content_type="application/json")

    # -- the flow ----------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        body = parse_json(await request.read())
        request_id = request.headers.get(HEADER_REQUEST_ID) or uuid.uuid4().hex
        with self.tracer.start_as_current_span(Pd.REQUEST, context=otel.extract(request.headers),
                                               kind=SpanKind.SERVER) as span:
            span.set_attribute(GenAi.REQUEST_ID, request_id)
            try:
                return await self._flow(request, body, request_id, arrival, span)
            except OpenAIError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.message))
                span.set_attribute(Http.RESPONSE_STATUS_CODE, exc.status)
                return exc.response()

    async def _flow(self, request: web.Request, body: dict, request_id: str, arrival: float, span) -> web.StreamResponse:
        path = request.path
        stream = body.get("stream") is True
        seed = derive.request_seed(body)
        span.set_attribute(Pd.SEED, seed)

        # Everything is checked before anything is called.
        try:
            check_media(body)
        except MediaError as exc:
            raise OpenAIError(400, str(exc), param=exc.param) from None
        encoders = _listed(request, HEADER_ENCODERS, self.c.encoder_endpoints, "encoders") or self.c.encoder_endpoints
        prefiller = None
        if not self.c.disable_prefill:
            chosen = _listed(request, HEADER_PREFILLER, self.c.prefill_endpoints, "prefillers", single=True)
            prefiller = chosen[0] if chosen else self._prefill_rr.next()
        await self._encode_all(request, body, request_id, encoders, path)

        kv_params = None
        first_token: str | None = None
        if prefiller:
            kv_params, first_token, prefill_answer = await self._prefill(request, body, seed, request_id, prefiller, path)
            span.set_attribute(Pd.PREFILLER, prefiller)
        span.set_attribute(Pd.FLOW, ("E" if encoders and derive.encoder_requests(body) else "") + ("P/D" if prefiller else "PD"))

        decode_body = derive.decode_request(body, seed, kv_params)
        early = self.c.stream_first_token and stream and first_token is not None
        out: web.StreamResponse | None = None
        if early:
            # Prefill's token goes to the client now, before decode is even asked; decode
            # will produce the same token first (same seed), and that copy is dropped below.
            out = web.StreamResponse(status=200, headers={"content-type": "text/event-stream",
                                                          "cache-control": "no-cache", "x-pd-prefiller": prefiller or ""})
            if self.c.decode_instance:
                out.headers["x-inference-pod"] = self.c.decode_instance
            await out.prepare(request)
            await out.write(_first_chunk(prefill_answer, first_token, path))
            self._ttft(span, arrival)
            span.add_event(Pd.FIRST_TOKEN_FROM_PREFILL)
        with self.tracer.start_as_current_span(Pd.DECODE) as dspan:
            headers = otel.inject({"content-type": "application/json", **_mock_headers(request, "decode"),
                                   HEADER_REQUEST_ID: request_id})
            try:
                upstream = await self.session.post(self.c.decode_url + path, json=decode_body, headers=headers)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                dspan.set_status(Status(StatusCode.ERROR, str(exc)))
                error = OpenAIError(502, f"decode instance {self.c.decode_url} unreachable: {exc}")
                if out is None:
                    raise error from None
                return await _end_with_error(out, error)
            try:
                if upstream.status != 200 and out is not None:
                    dspan.set_status(Status(StatusCode.ERROR, f"decode answered HTTP {upstream.status}"))
                    detail = upstream_message(await upstream.text())
                    return await _end_with_error(out, OpenAIError(502, f"decode failed after the first token: "
                                                                       f"HTTP {upstream.status} {detail}"))
                if upstream.status != 200 or not stream:
                    payload = await upstream.read()
                    resp = web.Response(body=payload, status=upstream.status, headers=_copy_headers(upstream))
                    if upstream.status == 200:
                        self._ttft(span, arrival)
                    else:
                        dspan.set_status(Status(StatusCode.ERROR, f"decode answered HTTP {upstream.status}"))
                    return resp
                if out is None:
                    out = web.StreamResponse(status=200, headers=_copy_headers(upstream))
                    if prefiller:
                        out.headers["x-pd-prefiller"] = prefiller
                    await out.prepare(request)
                skip_duplicate = early
                first_forwarded = False
                async for event in _sse_events(upstream):
                    if skip_duplicate and _is_role_only(event):
                        continue  # the client has its role chunk already, sent with prefill's token
                    if _has_content(event):
                        if skip_duplicate:
                            skip_duplicate = False
                            continue
                        if not first_forwarded:
                            first_forwarded = True
                            self._ttft(span, arrival)
                    await out.write(event)
                await out.write_eof()
                return out
            finally:
                upstream.release()

    def _ttft(self, span, arrival: float) -> None:
        if not span.attributes or Pd.TRUE_TTFT_MS not in span.attributes:
            span.set_attribute(Pd.TRUE_TTFT_MS, round((time.monotonic() - arrival) * 1000, 3))

    async def _encode_all(self, request: web.Request, body: dict, request_id: str, encoders: list[str], path: str) -> None:
        items = derive.encoder_requests(body)
        if not items or not encoders:
            return
        offset = next(self._encoder_offset)
        mock = _mock_headers(request, "encoder")

        async def one(index: int, item, req: dict) -> None:
            endpoint = encoders[(offset + index) % len(encoders)]
            with self.tracer.start_as_current_span(Pd.ENCODE) as espan:
                espan.set_attribute(Media.TYPE, media_kind(item.type))
                espan.set_attribute(Media.HASH, item.hash)
                espan.set_attribute(Pd.ENCODER, endpoint)
                espan.set_attribute(Pd.ITEM_INDEX, index)
                headers = otel.inject({"content-type": "application/json", **mock,
                                       HEADER_REQUEST_ID: derive.child_request_id(request_id, index)})
                try:
                    async with self.session.post(f"http://{endpoint}/v1/chat/completions", json=req, headers=headers) as resp:
                        if resp.status != 200:
                            detail = upstream_message(await resp.text())
                            raise OpenAIError(502, f"encoder {endpoint} failed on media item {index} ({item.type}): "
                                                   f"HTTP {resp.status} {detail}")
                        await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    espan.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise OpenAIError(502, f"encoder {endpoint} unreachable for media item {index} ({item.type}): {exc}") from None
                except OpenAIError as exc:
                    espan.set_status(Status(StatusCode.ERROR, exc.message))
                    raise

        results = await asyncio.gather(*(one(i, item, req) for i, (item, req) in enumerate(items)), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _prefill(self, request: web.Request, body: dict, seed: int, request_id: str, prefiller: str, path: str):
        with self.tracer.start_as_current_span(Pd.PREFILL) as pspan:
            pspan.set_attribute(Pd.PREFILLER, prefiller)
            headers = otel.inject({"content-type": "application/json", **_mock_headers(request, "prefill"),
                                   HEADER_REQUEST_ID: f"{request_id}:prefill"})
            try:
                async with self.session.post(f"http://{prefiller}{path}", json=derive.prefill_request(body, seed),
                                             headers=headers) as resp:
                    text = await resp.text()
                    if resp.status != 200:
                        pspan.set_status(Status(StatusCode.ERROR, f"HTTP {resp.status}"))
                        raise OpenAIError(502 if resp.status >= 500 else resp.status,
                                          f"prefill on {prefiller} failed: HTTP {resp.status} {upstream_message(text)}")
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                pspan.set_status(Status(StatusCode.ERROR, str(exc)))
                raise OpenAIError(502, f"prefiller {prefiller} unreachable: {exc}") from None
            try:
                answer = json.loads(text)
            except ValueError:
                answer = None
            params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
            if not params:
                what = "no kv_transfer_params" if isinstance(answer, dict) else f"a body that is not a JSON object: {text[:200]!r}"
                pspan.set_status(Status(StatusCode.ERROR, f"prefill answered {what}"))
                raise OpenAIError(502, f"prefill on {prefiller} answered HTTP 200 with {what}")
            choices = answer.get("choices")
            choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            message = choice.get("message")
            first = message.get("content") if isinstance(message, dict) else choice.get("text")
            return params, first, answer


async def _end_with_error(out: web.StreamResponse, error: OpenAIError) -> web.StreamResponse:
    """The status line is gone already: report the error in the stream, as vLLM does, and end it."""
    payload = {"error": {"message": error.message, "type": "BadGatewayError", "code": error.status}}
    await out.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
    await out.write_eof()
    return out


def _mock_headers(request: web.Request, target: str) -> dict[str, str]:
    prefix = f"x-mock-{target}-"
    return {"x-mock-" + k[len(prefix):]: v for k, v in request.headers.items() if k.lower().startswith(prefix)}


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _listed(request: web.Request, header: str, configured: list[str], what: str, *, single: bool = False) -> list[str]:
    """The endpoints ``header`` names ([] without it), each one of ``configured``; else a 400 naming the header."""
    value = request.headers.get(header, "")
    chosen = _split(value)
    if not value.strip():
        return []
    if (single and len(chosen) != 1) or any(ep not in configured for ep in chosen):
        expected = "one of" if single else "a comma-separated list of"
        raise OpenAIError(400, f"{header} must be {expected} this sidecar's {what} "
                               f"({', '.join(configured) or 'none configured'}), got {value[:200]!r}",
                          param=header, code="invalid_header")
    return chosen


def _copy_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() not in _SKIP_RESPONSE_HEADERS}


async def _sse_events(upstream: aiohttp.ClientResponse):
    """Whole SSE events (``data: ...\\n\\n``) from an upstream stream, as bytes."""
    buf = b""
    async for chunk in upstream.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            yield event + b"\n\n"
    if buf.strip():
        yield buf


def _choices(event: bytes) -> list:
    """The ``choices`` of one SSE data event ([] for [DONE], errors and what is not JSON)."""
    if not event.startswith(b"data:") or event.startswith(b"data: [DONE]"):
        return []
    try:
        payload = json.loads(event[5:])
    except ValueError:
        return []
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _has_content(event: bytes) -> bool:
    return any((c.get("delta") or {}).get("content") or c.get("text") for c in _choices(event))


def _is_role_only(event: bytes) -> bool:
    """A chat stream's opening chunk: a role and no content (vLLM sends it before the first token)."""
    choices = _choices(event)
    return bool(choices) and all((c.get("delta") or {}).get("role") and not (c.get("delta") or {}).get("content")
                                 for c in choices)


def _first_chunk(prefill_answer: dict, token: str, path: str) -> bytes:
    """Prefill's token as the stream's first chunk(s); chat in vLLM's order: role only, then the content."""
    base = {"id": prefill_answer.get("id", ""), "created": prefill_answer.get("created", int(time.time())),
            "model": prefill_answer.get("model", "")}
    if path.endswith("/chat/completions"):
        chunks = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
                  for delta in ({"role": "assistant", "content": ""}, {"content": token})]
    else:
        chunks = [{**base, "object": "text_completion",
                   "choices": [{"index": 0, "text": token, "logprobs": None, "finish_reason": None}]}]
    return b"".join(b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in chunks)
