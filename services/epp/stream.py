"""One ext_proc stream (= one HTTP request through Envoy) as a small state machine.

Envoy runs the filter in FULL_DUPLEX_STREAMED for the request body: it sends the request
headers, then body chunks as they arrive, and waits for our answers. The phases:

    AWAIT_HEADERS --request_headers--> BUFFERING --request_body(eos)--> FORWARDED --> (response path)
          |  (headers with end_of_stream: no body) ----------------------^
          +--- any failure to decide --> CLOSED (ImmediateResponse sent)

While BUFFERING nothing is answered: the body is collected to its end of stream, parsed, the
picker decides, and only then the headers response (destination header, ``envoy.lb``
metadata, clear_route_cache) and the body (unchanged, streamed back, end_of_stream on the last
chunk) go out together, which releases the request upstream.

The two-phase multipart flow will add a HOLDING phase between BUFFERING and FORWARDED: part 1
sent with end_of_stream false, part 2 sent from the response_headers handler. The transitions
live in ``_on_<message>`` methods so that phase slots in without reshaping the rest.
"""

from __future__ import annotations

import enum
import logging
from typing import Awaitable, Callable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from services.epp import protocol
from services.epp.picker import Decision, PickError, Picker
from services.epp.request import BadRequest, LlmRequest, parse_request

log = logging.getLogger("epp.stream")


class Phase(enum.Enum):
    AWAIT_HEADERS = "awaiting request headers"
    BUFFERING = "buffering request body"
    FORWARDED = "request released upstream"
    CLOSED = "closed"


Responses = list[pb.ProcessingResponse]


class StreamProcessor:
    """Feed it each ProcessingRequest in order; it returns the ProcessingResponses to send."""

    def __init__(
        self,
        picker: Picker,
        tracer: trace.Tracer,
        parent: otel_context.Context | None = None,
        *,
        on_decision: Callable[[Decision], Awaitable[None]] | None = None,
    ):
        self.picker = picker
        self.tracer = tracer
        self.parent = parent
        self.on_decision = on_decision
        self.phase = Phase.AWAIT_HEADERS
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.decision: Decision | None = None
        self.error: PickError | None = None
        self._span: trace.Span | None = None

    # ------------------------------------------------------------------ dispatch
    async def handle(self, request: pb.ProcessingRequest) -> Responses:
        kind = request.WhichOneof("request")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            log.warning("ignoring unexpected ext_proc message %r in phase %s", kind, self.phase.value)
            return []
        return await handler(getattr(request, kind))

    # ------------------------------------------------------------------ request path
    async def _on_request_headers(self, msg: pb.HttpHeaders) -> Responses:
        if self.phase is not Phase.AWAIT_HEADERS:
            return self._out_of_order("request_headers")
        self.headers = protocol.header_map(msg.headers)
        self._span = self.tracer.start_span(
            "epp.process",
            context=self.parent,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": "envoy.service.ext_proc.v3.ExternalProcessor",
                "rpc.method": "Process",
                "http.request.method": self.headers.get(":method", ""),
                "url.path": self.headers.get(":path", ""),
            },
        )
        if msg.end_of_stream:  # no body (e.g. GET /v1/models): decide on headers alone
            return await self._decide(trailers=False, body_follows=False)
        self.phase = Phase.BUFFERING
        return []

    async def _on_request_body(self, msg: pb.HttpBody) -> Responses:
        if self.phase is not Phase.BUFFERING:
            return self._out_of_order("request_body")
        self.body += msg.body
        if msg.end_of_stream:
            return await self._decide(trailers=False, body_follows=True)
        return []

    async def _on_request_trailers(self, msg: pb.HttpTrailers) -> Responses:
        if self.phase is not Phase.BUFFERING:
            return self._out_of_order("request_trailers")
        # The body ended without end_of_stream because trailers follow: decide now.
        return await self._decide(trailers=True, body_follows=True)

    # ------------------------------------------------------------------ response path
    async def _on_response_headers(self, msg: pb.HttpHeaders) -> Responses:
        return [protocol.headers_response(response_path=True)]

    async def _on_response_body(self, msg: pb.HttpBody) -> Responses:
        return protocol.body_responses(msg.body, end_of_stream=msg.end_of_stream, response_path=True)

    async def _on_response_trailers(self, msg: pb.HttpTrailers) -> Responses:
        return [protocol.trailers_response(response_path=True)]

    # ------------------------------------------------------------------ decision
    async def _decide(self, *, trailers: bool, body_follows: bool) -> Responses:
        span = self._span
        assert span is not None
        with trace.use_span(span, end_on_exit=False):
            try:
                with self.tracer.start_as_current_span("epp.pick") as pick_span:
                    try:
                        request = parse_request(self.headers, bytes(self.body))
                    except BadRequest as exc:
                        raise PickError(400, str(exc), code="invalid_request_body") from None
                    if request.model:
                        pick_span.set_attribute("gen_ai.request.model", request.model)
                    pick_span.set_attribute("epp.scorer", self.picker.scorer_name)
                    try:
                        decision = await self.picker.pick(request)
                    except PickError as exc:
                        pick_span.set_attribute("epp.scorer", exc.scorer or self.picker.scorer_name)
                        pick_span.set_attribute("epp.reason", exc.message)
                        pick_span.set_status(Status(StatusCode.ERROR, exc.code))
                        raise
                    self._annotate(pick_span, decision, request)
            except PickError as exc:
                return self._fail(exc)
            except Exception as exc:  # a picker bug must still answer Envoy, not hang the request
                log.exception("picker failed")
                return self._fail(PickError(500, f"endpoint picker error: {exc}", code="epp_internal_error"))

            with self.tracer.start_as_current_span("epp.inject") as inject_span:
                out = self._release(decision, trailers=trailers, body_follows=body_follows)
                inject_span.set_attribute("epp.endpoint", decision.address)
                inject_span.set_attribute("epp.messages", len(out))
        self.decision = decision
        self._annotate(span, decision, None)
        span.end()  # before the answer is written: the decision exists before Envoy can act on it
        self.phase = Phase.FORWARDED
        if self.on_decision is not None:
            await self.on_decision(decision)
        return out

    def _annotate(self, span: trace.Span, decision: Decision, request: LlmRequest | None) -> None:
        span.set_attribute("epp.endpoint", decision.address)
        span.set_attribute("epp.endpoint.name", decision.name)
        span.set_attribute("epp.scorer", decision.scorer)
        span.set_attribute("epp.reason", decision.reason)
        if decision.fallbacks:
            span.set_attribute("epp.fallbacks", ",".join(decision.fallbacks))
        if decision.worker_id is not None:
            span.set_attribute("epp.worker_id", decision.worker_id)
        for key, value in decision.attributes.items():
            span.set_attribute(key, value)

    def _release(self, decision: Decision, *, trailers: bool, body_follows: bool) -> Responses:
        """The messages that carry the decision and let the request go upstream."""
        set_headers = {protocol.DESTINATION_HEADER: decision.address}
        if decision.worker_id is not None:
            set_headers[protocol.WORKER_ID_HEADER] = decision.worker_id
        if body_follows:
            # In FULL_DUPLEX_STREAMED Envoy cannot trust the original length once a processor
            # may rewrite the body; say the length of the body we send back.
            set_headers["content-length"] = str(len(self.body))
        out: Responses = [
            protocol.headers_response(
                set_headers,
                metadata={protocol.METADATA_NAMESPACE: {protocol.METADATA_KEY: decision.metadata_value}},
                clear_route_cache=True,
            )
        ]
        if body_follows:
            out += protocol.body_responses(bytes(self.body), end_of_stream=not trailers)
        if trailers:
            out.append(protocol.trailers_response())
        return out

    def _fail(self, exc: PickError) -> Responses:
        self.error = exc
        span = self._span
        if span is not None:
            span.set_attribute("epp.reason", exc.message)
            span.set_attribute("epp.scorer", exc.scorer or self.picker.scorer_name)
            span.set_attribute("http.response.status_code", exc.status)
            span.set_attribute("error.type", exc.code)
            span.set_status(Status(StatusCode.ERROR, exc.message))
            span.end()
        log.info("answering %d (%s): %s", exc.status, exc.code, exc.message)
        self.phase = Phase.CLOSED
        return [protocol.immediate_response(exc.status, exc.message, code=exc.code)]

    def _out_of_order(self, kind: str) -> Responses:
        log.warning("ext_proc message %s arrived in phase %s; ignored", kind, self.phase.value)
        return []

    # ------------------------------------------------------------------ end of stream
    def close(self, reason: str = "stream closed") -> None:
        """The gRPC stream ended; end the span if no decision was ever made."""
        if self._span is not None and self._span.is_recording() and self.phase in (Phase.AWAIT_HEADERS, Phase.BUFFERING):
            self._span.set_attribute("epp.reason", f"{reason} before the request body ended")
            self._span.set_status(Status(StatusCode.ERROR, reason))
            self._span.end()
        if self.phase is not Phase.CLOSED:
            self.phase = Phase.CLOSED
