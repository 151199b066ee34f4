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

With the body buffered by Envoy (``request_body="buffered"``, BUFFERED) the headers are answered at once (Envoy
waits for that before it sends the body), the whole body comes in one message, and its answer carries the
decision (the headers are still held, so the mutation and the new route apply); the body goes on unchanged.
With no body sent (``request_body="none"``, NONE) the picker decides on the headers alone, as it does for a
request without a body. Either way a trailers message that follows is answered empty.

The two-phase multipart flow (``multipart=True``) adds HOLDING between BUFFERING and FORWARDED:

    BUFFERING --request_body(eos)--> HOLDING --response_headers [+ first response_body]--> FORWARDED

At the end of the client's body the headers response rewrites ``content-type`` to
``multipart/mixed; boundary=...`` and removes ``content-length``; the body goes back as part 1
(``request_payload``, the client's JSON) with ``end_of_stream: false``, so Envoy sends it
upstream and keeps the request open (event ``part1_sent``). The backend prefills and answers
with its headers and first token. Event ``response_headers_seen`` marks the headers; with the
``first-token`` trigger (default) a streamed request's headers are let through at once and
the EPP waits for the first response body chunk (event ``first_token_seen``); with the
``headers`` trigger, or for a request that is not streamed (its body comes only after
decoding, which waits for part 2), the headers are enough. Then the ``epp.inject`` span makes
the metadata, and part 2 (``metadata``) plus the closing boundary go out with
``end_of_stream: true``, which ends the upstream request (event ``part2_sent``), ahead of the
held response message. ``epp.process`` covers the whole exchange.
"""

from __future__ import annotations

import enum
import json
import logging
import time
import uuid
from typing import Awaitable, Callable

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from eppkit.observability.contract import Epp, Error, GenAi, Http, Rpc
from eppkit.services.epp import BODY_PATHS, MULTIPART_TRIGGERS, protocol
from eppkit.services.epp.sidecar import Picker
from eppkit.services.picker.decision import Decision, PickError
from eppkit.services.picker.request import BadRequest, LlmRequest, parse_request
from eppkit.services.vllm.multipart import METADATA_PART, PAYLOAD_PART, closing, encode_part
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger("epp.stream")


class Phase(enum.Enum):
    AWAIT_HEADERS = "awaiting request headers"
    BUFFERING = "buffering request body"
    HOLDING = "part 1 sent, request held open until the response (headers, first token)"
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
        multipart: bool = False,
        multipart_trigger: str = "first-token",
        request_body: str = BODY_PATHS[0],
    ):
        if multipart_trigger not in MULTIPART_TRIGGERS:
            raise ValueError(f"multipart trigger {multipart_trigger!r}: choose one of {', '.join(MULTIPART_TRIGGERS)}")
        if request_body not in BODY_PATHS:
            raise ValueError(f"request body {request_body!r}: choose one of {', '.join(BODY_PATHS)}")
        if multipart and request_body != "streamed":
            raise ValueError("the two-phase multipart flow needs the request body streamed")
        self.request_body = request_body
        self.picker = picker
        self.tracer = tracer
        self.parent = parent
        self.on_decision = on_decision
        self.multipart = multipart
        self.multipart_trigger = multipart_trigger
        self.request: LlmRequest | None = None
        self._response_headers: dict[str, str] | None = None  # multipart: seen while HOLDING
        self.boundary = ""
        self.metadata: dict | None = None  # multipart: the metadata part the EPP made
        self._trailers = False
        self._part1_sent_at = 0.0
        self.phase = Phase.AWAIT_HEADERS
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.decision: Decision | None = None
        self.error: PickError | None = None
        self._span: trace.Span | None = None
        self.subset: tuple[str, ...] | None = None  # the data plane's subset hint, when it sends one

    # ------------------------------------------------------------------ dispatch
    async def handle(self, request: pb.ProcessingRequest) -> Responses:
        kind = request.WhichOneof("request")
        if kind in ("request_headers", "request_body"):
            subset = protocol.subset_hint(request)
            if subset is not None:
                self.subset = subset
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
            Epp.PROCESS,
            context=self.parent,
            kind=SpanKind.SERVER,
            attributes={
                Rpc.SYSTEM: "grpc",
                Rpc.SERVICE: "envoy.service.ext_proc.v3.ExternalProcessor",
                Rpc.METHOD: "Process",
                Http.REQUEST_METHOD: self.headers.get(":method", ""),
                Http.URL_PATH: self.headers.get(":path", ""),
            },
        )
        if msg.end_of_stream or self.request_body == "none":  # no body (GET /v1/models), or none sent: decide now
            return await self._decide(trailers=False, body_follows=False)
        self.phase = Phase.BUFFERING
        if self.request_body == "buffered":
            return [protocol.headers_response()]  # Envoy sends the buffered body once the headers are answered
        return []

    async def _on_request_body(self, msg: pb.HttpBody) -> Responses:
        if self.phase is not Phase.BUFFERING:
            return self._out_of_order("request_body")
        self.body += msg.body
        if msg.end_of_stream or self.request_body == "buffered":  # buffered: the whole body, trailers or not
            return await self._decide(trailers=False, body_follows=True)
        return []

    async def _on_request_trailers(self, msg: pb.HttpTrailers) -> Responses:
        if self.phase is Phase.FORWARDED and self.request_body != "streamed":
            return [protocol.trailers_response()]  # decided on the headers or the buffered body already
        if self.phase is not Phase.BUFFERING:
            return self._out_of_order("request_trailers")
        # The body ended without end_of_stream because trailers follow: decide now.
        return await self._decide(trailers=True, body_follows=True)

    # ------------------------------------------------------------------ response path
    async def _on_response_headers(self, msg: pb.HttpHeaders) -> Responses:
        passed = [protocol.headers_response(response_path=True)]
        if self.phase is not Phase.HOLDING:
            return passed
        headers = protocol.header_map(msg.headers)
        self._response_headers = headers
        self._event(Epp.RESPONSE_HEADERS_SEEN, {Http.RESPONSE_STATUS_CODE: headers.get(":status", "")})
        wait_for_token = (self.multipart_trigger == "first-token" and not msg.end_of_stream
                          and self.request is not None and self.request.stream and headers.get(":status") == "200")
        if wait_for_token:
            return passed  # the headers go on to the client; part 2 waits for the first token
        return self._inject_metadata() + passed

    async def _on_response_body(self, msg: pb.HttpBody) -> Responses:
        passed = protocol.body_responses(msg.body, end_of_stream=msg.end_of_stream, response_path=True)
        if self.phase is Phase.HOLDING:
            self._event(Epp.FIRST_TOKEN_SEEN, {Epp.MULTIPART_CHUNK_BYTES: len(msg.body)})
            return self._inject_metadata() + passed
        return passed

    async def _on_response_trailers(self, msg: pb.HttpTrailers) -> Responses:
        passed = [protocol.trailers_response(response_path=True)]
        if self.phase is Phase.HOLDING:
            return self._inject_metadata() + passed
        return passed

    # ------------------------------------------------------------------ decision
    async def _decide(self, *, trailers: bool, body_follows: bool) -> Responses:
        span = self._span
        assert span is not None
        with trace.use_span(span, end_on_exit=False):
            try:
                with self.tracer.start_as_current_span(Epp.PICK) as pick_span:
                    try:
                        request = parse_request(self.headers, bytes(self.body))
                    except BadRequest as exc:
                        raise PickError(400, str(exc), code="invalid_json") from None
                    request.subset = self.subset
                    self.request = request
                    if request.model:
                        pick_span.set_attribute(GenAi.REQUEST_MODEL, request.model)
                    pick_span.set_attribute(Epp.SCORER, self.picker.scorer_name)
                    try:
                        decision = await self.picker.pick(request)
                    except PickError as exc:
                        pick_span.set_attribute(Epp.SCORER, exc.scorer or self.picker.scorer_name)
                        pick_span.set_attribute(Epp.REASON, exc.message)
                        pick_span.set_status(Status(StatusCode.ERROR, exc.code))
                        raise
                    self._annotate(pick_span, decision, request)
            except PickError as exc:
                return self._fail(exc)
            except Exception as exc:  # a picker bug must still answer Envoy, not hang the request
                log.exception("picker failed")
                return self._fail(PickError(500, f"endpoint picker error: {exc}", code="epp_internal_error"))

            if self.multipart and body_follows:
                return await self._send_part1(decision, trailers=trailers)

            with self.tracer.start_as_current_span(Epp.INJECT) as inject_span:
                out = self._release(decision, trailers=trailers, body_follows=body_follows)
                inject_span.set_attribute(Epp.ENDPOINT, decision.address)
                inject_span.set_attribute(Epp.MESSAGES, len(out))
        self.decision = decision
        self._annotate(span, decision, None)
        span.end()  # before the answer is written: the decision exists before Envoy can act on it
        self.phase = Phase.FORWARDED
        if self.on_decision is not None:
            await self.on_decision(decision)
        return out

    def _annotate(self, span: trace.Span, decision: Decision, request: LlmRequest | None) -> None:
        span.set_attribute(Epp.ENDPOINT, decision.address)
        span.set_attribute(Epp.ENDPOINT_NAME, decision.name)
        span.set_attribute(Epp.SCORER, decision.scorer)
        span.set_attribute(Epp.REASON, decision.reason)
        if decision.fallbacks:
            span.set_attribute(Epp.FALLBACKS, ",".join(decision.fallbacks))
        if decision.worker_id is not None:
            span.set_attribute(Epp.WORKER_ID, decision.worker_id)
        for key, value in decision.attributes.items():
            span.set_attribute(key, value)
        span.set_attributes(decision.prediction())
        if decision.stages is not None:
            span.set_attributes(decision.stages.attributes(Epp.DECISION))

    @staticmethod
    def _decision_response(decision: Decision, set_headers: dict[str, str], remove: list[str], *,
                           replace_body: bytes | None = None, to_body: bool = False) -> pb.ProcessingResponse:
        """The headers response that carries the decision: headers, ``envoy.lb`` metadata, a new route (and with
        ``replace_body``, the whole body: CONTINUE_AND_REPLACE); ``to_body``: as the buffered body's answer."""
        return protocol.headers_response(
            set_headers, remove_headers=remove, clear_route_cache=True, replace_body=replace_body, to_body=to_body,
            metadata={protocol.METADATA_NAMESPACE: {protocol.METADATA_KEY: decision.metadata_value}})

    def _release(self, decision: Decision, *, trailers: bool, body_follows: bool) -> Responses:
        """The messages that carry the decision and let the request go upstream."""
        set_headers, remove = decision.headers()
        if self.request_body == "buffered" and body_follows:
            # The answer to the buffered body: the decision; the body goes on as Envoy holds it.
            return [self._decision_response(decision, set_headers, remove, to_body=True)]
        if body_follows:
            # In FULL_DUPLEX_STREAMED Envoy cannot trust the original length once a processor
            # may rewrite the body; say the length of the body we send back.
            set_headers["content-length"] = str(len(self.body))
        if trailers:
            # The body ended with trailers: one reply carries the decision and the whole body
            # (CONTINUE_AND_REPLACE), and no trailers reply follows. Streamed back, the body would reach the
            # backend twice on a route with a retry policy (the kit's picked route): Envoy's router keeps a
            # copy of it for retries and sends that copy on again when the trailers reply resumes the request
            # (Envoy 1.36-1.40, envoyproxy/envoy#45470; docs/epp-protocol.md, "Trailers").
            return [self._decision_response(decision, set_headers, remove, replace_body=bytes(self.body))]
        out: Responses = [self._decision_response(decision, set_headers, remove)]
        if body_follows:
            out += protocol.body_responses(bytes(self.body), end_of_stream=True)
        return out

    # ------------------------------------------------------------------ two-phase multipart
    async def _send_part1(self, decision: Decision, *, trailers: bool) -> Responses:
        """Headers (multipart content-type, no length) and part 1, leaving the request open."""
        span = self._span
        assert span is not None
        self.boundary = f"eppkit-{uuid.uuid4().hex}"
        set_headers, remove = decision.headers()
        set_headers["content-type"] = f"multipart/mixed; boundary={self.boundary}"
        # The body grows by part 2 later: no length, so Envoy sends it chunked upstream.
        remove = [*remove, "content-length"]
        part1 = encode_part(self.boundary, PAYLOAD_PART, bytes(self.body), first=True)
        out: Responses = [self._decision_response(decision, set_headers, remove),
                          *protocol.body_responses(part1, end_of_stream=False)]
        self._trailers = trailers
        self.decision = decision
        self._annotate(span, decision, None)
        span.set_attribute(Epp.MULTIPART_BOUNDARY, self.boundary)
        # Before the answer is written: Envoy cannot send part 1 upstream before this instant.
        span.add_event(Epp.PART1_SENT, {Epp.MULTIPART_PART1_BYTES: len(part1), Epp.ENDPOINT: decision.address})
        self._part1_sent_at = time.monotonic()
        self.phase = Phase.HOLDING
        if self.on_decision is not None:
            await self.on_decision(decision)
        return out

    def _event(self, name: str, attributes: dict) -> None:
        """An event on epp.process, with the time since part 1 left."""
        held_ms = (time.monotonic() - self._part1_sent_at) * 1000.0
        if self._span is not None:
            self._span.add_event(name, {**attributes, Epp.MULTIPART_HELD_MS: round(held_ms, 3)})

    def _inject_metadata(self) -> Responses:
        """The backend answered (headers, first token): make part 2, send it and the closing boundary."""
        span = self._span
        decision = self.decision
        assert span is not None and decision is not None
        response_headers = self._response_headers or {}
        status = response_headers.get(":status", "")
        held_ms = (time.monotonic() - self._part1_sent_at) * 1000.0
        with trace.use_span(span, end_on_exit=False):
            with self.tracer.start_as_current_span(Epp.INJECT) as inject_span:
                self.metadata = {
                    "request_id": self.headers.get("x-request-id", ""),
                    "endpoint": decision.address,
                    "endpoint_name": decision.name,
                    "served_by": response_headers.get("x-inference-pod", ""),
                    "response_status": int(status) if status.isdigit() else status,
                    "held_ms": round(held_ms, 3),
                    "nonce": uuid.uuid4().hex,
                }
                raw = json.dumps(self.metadata, separators=(",", ":")).encode()
                part2 = encode_part(self.boundary, METADATA_PART, raw) + closing(self.boundary)
                out = protocol.body_responses(part2, end_of_stream=not self._trailers)
                if self._trailers:
                    out.append(protocol.trailers_response())
                inject_span.set_attribute(Epp.ENDPOINT, decision.address)
                inject_span.set_attribute(Epp.MULTIPART_METADATA, raw.decode())
                inject_span.set_attribute(Epp.MULTIPART_METADATA_BYTES, len(raw))
                inject_span.set_attribute(Epp.MULTIPART_BOUNDARY, self.boundary)
                inject_span.set_attribute(Epp.MULTIPART_TRIGGER, self.multipart_trigger)
                inject_span.set_attribute(Epp.MESSAGES, len(out))
        span.add_event(Epp.PART2_SENT, {Epp.MULTIPART_PART2_BYTES: len(part2)})
        span.end()  # before the answer is written, as for the decision
        self.phase = Phase.FORWARDED
        return out

    def _fail(self, exc: PickError) -> Responses:
        self.error = exc
        span = self._span
        if span is not None:
            span.set_attribute(Epp.REASON, exc.message)
            span.set_attribute(Epp.SCORER, exc.scorer or self.picker.scorer_name)
            span.set_attribute(Http.RESPONSE_STATUS_CODE, exc.status)
            span.set_attribute(Error.TYPE, exc.code)
            span.set_status(Status(StatusCode.ERROR, exc.message))
            span.end()
        log.info("answering %d (%s): %s", exc.status, exc.code, exc.message)
        self.phase = Phase.CLOSED
        return [protocol.immediate_response(exc.status, exc.message, code=exc.code,
                                            extra_headers=exc.headers.items())]

    def _out_of_order(self, kind: str) -> Responses:
        log.warning("ext_proc message %s arrived in phase %s; ignored", kind, self.phase.value)
        return []

    # ------------------------------------------------------------------ end of stream
    def close(self, reason: str = "stream closed") -> None:
        """The gRPC stream ended; end the span if no decision was ever made."""
        if self._span is not None and self._span.is_recording() and self.phase in (Phase.AWAIT_HEADERS, Phase.BUFFERING):
            self._span.set_attribute(Epp.REASON, f"{reason} before the request body ended")
            self._span.set_status(Status(StatusCode.ERROR, reason))
            self._span.end()
        elif self._span is not None and self._span.is_recording() and self.phase is Phase.HOLDING:
            self._span.add_event(Epp.STREAM_CLOSED_WHILE_HOLDING)
            self._span.set_status(Status(StatusCode.ERROR, f"{reason} while holding the request open (part 2 never sent)"))
            self._span.end()
        if self.phase is not Phase.CLOSED:
            self.phase = Phase.CLOSED
