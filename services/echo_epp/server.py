"""The echo EPP's ext_proc server (grpc.aio): every message answered at once, in the order Envoy asked."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from typing import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from eppkit.observability import otel
from eppkit.observability.contract import EchoEpp, Epp, Http, Rpc
from eppkit.services.echo_epp import LEAK_BYTES, PROBE_TIMEOUT_S, SLOW_DECISION_S, SLOWS_BY_S, STOP_AFTER, TRUNCATE_AT
from eppkit.services.echo_epp.queue import EchoQueue, dropped_headers
from eppkit.services.epp import protocol
from eppkit.services.picker import headers, roles
from eppkit.services.picker.flow_control import Dropped
from eppkit.services.runner import until_stopped
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind

log = logging.getLogger("echo-epp")
# What the protocol check of the served endpoint reads back (GAIE's conformance EPP writes the same).
SERVED_ECHO = "x-conformance-test-served-endpoint"


class Pool:
    """``ip:port`` endpoints in order, each with its ``llm-d.ai/role`` when given (``--pod-roles``); round robin
    over those a request may have."""

    def __init__(self, endpoints: list[str], pod_roles: dict[str, str] | None = None):
        self.endpoints = endpoints
        self.roles = dict(pod_roles or {})
        self._turn = itertools.count()
        self._prefill_turn = itertools.count()

    def pick(self, allowed: list[str], max_fallbacks: int) -> list[str]:
        if not allowed:
            return []
        start = next(self._turn) % len(allowed)
        ordered = allowed[start:] + allowed[:start]
        return ordered[: 1 + max_fallbacks]

    @property
    def disaggregated(self) -> bool:
        return roles.disaggregated(self.roles.get(ep) for ep in self.endpoints)

    def with_role(self, wanted) -> list[str]:
        """The endpoints whose role ``wanted`` (a predicate of :mod:`eppkit.services.picker.roles`) accepts."""
        return [ep for ep in self.endpoints if wanted(self.roles.get(ep))]

    def prefiller(self, misbehave: str) -> str | None:
        """The prefill pod to name (round robin over the prefill-capable ones) in a disaggregated pool; with
        decode-as-prefiller, a decode-only pod."""
        if not self.disaggregated:
            return None
        decode_only = self.with_role(lambda role: role == roles.DECODE)
        if misbehave == "decode-as-prefiller" and decode_only:
            return decode_only[0]
        able = self.with_role(roles.prefill_capable)
        return able[next(self._prefill_turn) % len(able)]


async def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """The pod at ``address`` accepts a connection (a pod that is down is not eligible)."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


def forced(pool: Pool, value: str) -> list[str]:
    """GAIE's test header: "ip" or "ip:port" entries, in order, without repeats."""
    out: list[str] = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        for ep in pool.endpoints:
            if (ep == item or ep.rpartition(":")[0] == item) and ep not in out:
                out.append(ep)
    return out


def reencoded(body: bytes) -> bytes:
    """``body`` as Go's ``json.Marshal`` writes a ``map[string]any`` it was read into (GAIE's EPP v1.5.0 does):
    numbers as float64 (9007199254740993 becomes 9007199254740992), the last of two duplicate keys, keys sorted,
    no spaces. A body that is not JSON goes back as it came."""
    try:
        doc = json.loads(body, parse_int=lambda text: int(float(text)))
    except ValueError:
        return body
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


class EchoProcessor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, pool: Pool, tracer: trace.Tracer, *, misbehave: str = "none", max_fallbacks: int = 2,
                 shed_header: str = "", queue: EchoQueue | None = None):
        self.pool, self.tracer, self.misbehave = pool, tracer, misbehave
        self.queue = queue  # flow control (--flow-control): None, off
        self.max_fallbacks, self.shed_header = max_fallbacks, shed_header
        self._streams = 0
        self._opened = 0  # every stream so far (stops-after-n)
        self._kept: list[bytearray] = []  # leaks-per-stream's

    async def eligible(self, subset: tuple[str, ...] | None) -> list[str]:
        """The endpoints a request may go to: decode-capable ones (every one in a pool without roles), within the
        subset hint only those that answer; with empty-subset-ignored, the whole pool when none is."""
        serving = self.pool.with_role(roles.decode_capable)
        if subset is None:
            return serving
        allowed = [ep for ep in serving if ep in subset]
        allowed = [ep for ep, up in zip(allowed, await asyncio.gather(*map(answers, allowed))) if up]
        return allowed or (serving if self.misbehave == "empty-subset-ignored" else [])

    def no_endpoint(self) -> pb.ProcessingResponse:
        """503: no endpoint fits (non-openai-503: a plain-text body, as GAIE's EPP v1.5.0 answers)."""
        message = "no endpoint available for this request"
        if self.misbehave == "non-openai-503":
            return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
                status=http_status_pb2.HttpStatus(code=503), body=message.encode(), details="epp_no_endpoint"))
        return protocol.immediate_response(503, message, code="no_endpoint")

    async def decide(self, request_headers: dict[str, str], subset: tuple[str, ...] | None) -> pb.ProcessingResponse:
        """The decision on the request headers: 429 to shed, 503 when no endpoint fits, else the pick (and in a
        disaggregated pool the prefill pod, in x-prefiller-host-port)."""
        if self.shed_header and self.shed_header in request_headers:
            return protocol.immediate_response(429, f"request shed ({self.shed_header})", code="shed")
        if self.misbehave == "shed-every-objective" and headers.OBJECTIVE in request_headers:
            return protocol.immediate_response(429, f"request shed ({headers.OBJECTIVE}: "
                                               f"{request_headers[headers.OBJECTIVE]})", code="shed")
        allowed = await self.eligible(subset)
        test = request_headers.get(headers.TEST_ENDPOINT_SELECTION)
        picked = [ep for ep in forced(self.pool, test) if ep in allowed] if test else \
            self.pool.pick(allowed, self.max_fallbacks)
        if not picked:
            return self.no_endpoint()
        if self.misbehave == "prefill-as-destination" and self.pool.disaggregated:
            picked = self.pool.with_role(lambda role: role == roles.PREFILL)[:1]
        value = ",".join(picked)
        header_value = self.pool.endpoints[-1] if self.misbehave == "destination-mismatch" else value
        if self.misbehave == "destination-mismatch" and header_value == value:
            header_value = self.pool.endpoints[0]
        set_headers = {headers.DESTINATION: header_value}
        prefiller = self.pool.prefiller(self.misbehave)
        if prefiller:
            set_headers[headers.PREFILLER] = prefiller
        return protocol.headers_response(set_headers, clear_route_cache=True,
                                         metadata={protocol.METADATA_NAMESPACE: {protocol.METADATA_KEY: value}})

    async def admitted(self, request_headers: dict[str, str]) -> pb.ProcessingResponse | None:
        """With flow control: wait for the request's turn (None), or the drop's answer. A forced or steered-to-shed
        request does not wait."""
        if self.queue is None or any(name in request_headers for name in (headers.TEST_ENDPOINT_SELECTION,
                                                                           self.shed_header or headers.SHED)):
            return None
        try:
            await self.queue.admit(request_headers)
        except Dropped as exc:
            return protocol.immediate_response(exc.status, exc.message, code=exc.reason,
                                               extra_headers=dropped_headers(exc))
        return None

    def echo(self, body: pb.HttpBody, *, response_path: bool = False, first: bool = False) -> pb.ProcessingResponse:
        msg = pb.ProcessingResponse()
        target = msg.response_body if response_path else msg.request_body
        data = body.body
        if self.misbehave == "empty-body-reply":
            target.response.SetInParent()  # an empty CommonResponse: no body mutation at all
            return msg
        if not response_path and first and self.misbehave == "change-body":
            data = data.replace(b" ", b"", 1)
        if not response_path and self.misbehave == "buffered-body-mutation":
            target.response.body_mutation.body = data
            return msg
        target.response.body_mutation.streamed_response.body = data
        keep_eos = response_path or self.misbehave != "drop-end-of-stream"
        if self.misbehave == "eos-only-on-empty-chunk" and data and not response_path:
            keep_eos = False  # it waits for an empty chunk to end on, which a last chunk with data never is
        target.response.body_mutation.streamed_response.end_of_stream = body.end_of_stream and keep_eos
        return msg

    def response_headers_reply(self, served: str) -> pb.ProcessingResponse:
        """The response headers reply: the served endpoint echoed (as GAIE's conformance EPP does), and with
        metadata-on-response envoy.lb metadata naming another pod, with framing-headers a transfer-encoding."""
        set_headers = {SERVED_ECHO: served} if served else {}
        if self.misbehave == "framing-headers":
            set_headers["transfer-encoding"] = "chunked"
        metadata = None
        if self.misbehave == "metadata-on-response":
            other = next((ep for ep in self.pool.endpoints if ep != served), served)
            metadata = {protocol.METADATA_NAMESPACE: {protocol.METADATA_KEY: other}}
        return protocol.headers_response(set_headers or None, response_path=True, metadata=metadata)

    async def Process(self, requests: AsyncIterator[pb.ProcessingRequest],  # noqa: N802 (gRPC's name)
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        # one-stream counts requests in their request phase (headers to the body's end): a stream that is
        # still closing after its response cannot fail the next request of a sequential client.
        if self.misbehave == "one-stream" and self._streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "the echo EPP (one-stream) serves one stream")
        if self.misbehave == "healthy-but-refusing":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the echo EPP (healthy-but-refusing) serves no stream")
        self._opened += 1
        if self.misbehave == "stops-after-n" and self._opened > STOP_AFTER:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the echo EPP (stops-after-n) served its {STOP_AFTER}")
        if self.misbehave == "leaks-per-stream":
            self._kept.append(bytearray(b"x" * LEAK_BYTES))  # touched: resident, never freed
        self._streams += 1
        counted = True

        def request_done() -> None:
            nonlocal counted
            if counted:
                self._streams -= 1
                counted = False
        parent = None if self.misbehave == "own-trace" else otel.extract(dict(context.invocation_metadata()))
        span = self.tracer.start_span(EchoEpp.PROCESS, context=parent, kind=SpanKind.SERVER, attributes={
            Rpc.SYSTEM: "grpc", Rpc.SERVICE: protocol.EXT_PROC_SERVICE, Rpc.METHOD: "Process",
            EchoEpp.MISBEHAVIOUR: self.misbehave})
        try:
            held: pb.ProcessingResponse | None = None  # reply-out-of-order: the headers reply, sent late
            subset: tuple[str, ...] | None = None
            served = ""
            first_body = True
            buffered = b""  # reencode-json's body so far
            passed = 0  # truncate-body's: the request body's bytes so far
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind in ("request_headers", "request_body"):
                    subset = protocol.subset_hint(request) or subset
                if kind == "request_headers":
                    found = protocol.header_map(request.request_headers.headers)
                    span.set_attribute(Http.REQUEST_METHOD, found.get(":method", ""))
                    span.set_attribute(Http.URL_PATH, found.get(":path", ""))
                    reply = await self.admitted(found)
                    reply = reply or await self.decide(found, subset)
                    if reply.HasField("request_headers"):
                        decision = reply.dynamic_metadata.fields[protocol.METADATA_NAMESPACE].struct_value
                        span.set_attribute(Epp.ENDPOINT, decision.fields[protocol.METADATA_KEY].string_value)
                        if self.queue is not None:
                            self.queue.picked(decision.fields[protocol.METADATA_KEY].string_value.split(",")[0])
                    if reply.HasField("immediate_response"):
                        span.set_attribute(Epp.REASON, reply.immediate_response.details)
                        yield reply
                        return
                    if request.request_headers.end_of_stream and self.misbehave == "wait-for-body":
                        continue  # a body never comes: the request hangs, as such an EPP's would
                    if self.misbehave == "reply-out-of-order" and not request.request_headers.end_of_stream:
                        held = reply
                        continue
                    if request.request_headers.end_of_stream:
                        request_done()
                    if self.misbehave == "slow-decision":
                        await asyncio.sleep(SLOW_DECISION_S)
                    elif self.misbehave == "slows-per-stream":
                        await asyncio.sleep(SLOWS_BY_S * (self._opened / 1000) ** 2)
                    yield reply
                elif kind == "request_body":
                    if request.request_body.end_of_stream:
                        request_done()
                    if self.misbehave == "reencode-json":  # held until its end, then written again whole
                        buffered += request.request_body.body
                        chunk = pb.HttpBody(end_of_stream=request.request_body.end_of_stream,
                                            body=reencoded(buffered) if request.request_body.end_of_stream else b"")
                        yield self.echo(chunk)
                        continue
                    body = request.request_body
                    if self.misbehave == "truncate-body":  # what is past TRUNCATE_AT never goes back
                        body = pb.HttpBody(body=body.body[:max(0, TRUNCATE_AT - passed)],
                                           end_of_stream=body.end_of_stream)
                        passed += len(request.request_body.body)
                    yield self.echo(body, first=first_body)
                    first_body = False
                    if held is not None:
                        yield held
                        held = None
                elif kind == "request_trailers":
                    if self.misbehave != "unanswered-trailers":
                        yield protocol.trailers_response()
                elif kind == "response_headers":
                    namespace = request.metadata_context.filter_metadata.get(protocol.METADATA_NAMESPACE)
                    if namespace is not None and headers.SERVED in namespace.fields:
                        served = namespace.fields[headers.SERVED].string_value
                    yield self.response_headers_reply(served)
                elif kind == "response_body":
                    if self.misbehave == "stall-response":
                        continue
                    yield self.echo(request.response_body, response_path=True)
                elif kind == "response_trailers":
                    if self.misbehave != "unanswered-trailers":
                        yield protocol.trailers_response(response_path=True)
        finally:
            request_done()
            span.end()


async def serve(host: str, port: int, pool: Pool, tracer: trace.Tracer, *, misbehave: str, max_fallbacks: int,
                shed_header: str, queue: EchoQueue | None = None) -> None:
    server = grpc.aio.server(options=list(protocol.SERVER_OPTIONS))
    pb_grpc.add_ExternalProcessorServicer_to_server(
        EchoProcessor(pool, tracer, misbehave=misbehave, max_fallbacks=max_fallbacks, shed_header=shed_header,
                      queue=queue), server)
    health_servicer = health.aio.HealthServicer()
    for service in ("",) if misbehave == "no-health-services" else protocol.HEALTH_SERVICES:
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if server.add_insecure_port(f"{host}:{port}") == 0:
        raise OSError(f"cannot bind {host}:{port}")
    await server.start()
    log.info("echo-epp listening on grpc://%s:%d (%d endpoints, misbehaviour: %s)", host, port, len(pool.endpoints),
             misbehave)
    if queue is not None:
        await queue.start()
    await until_stopped()
    await server.stop(1.0)
    if queue is not None:
        await queue.stop()
