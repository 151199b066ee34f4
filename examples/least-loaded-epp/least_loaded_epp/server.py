"""The ext_proc server: every message answered in order; the body buffered, then the decision and the body."""

from __future__ import annotations

import json

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from opentelemetry import propagate, trace

from least_loaded_epp.picker import LeastLoaded, NoEndpoint

DESTINATION = "x-gateway-destination-endpoint"
LB = "envoy.lb"
SUBSET_NAMESPACE, SUBSET = "envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset"
TEST_HEADER = "test-epp-endpoint-selection"
CHUNK = 64 * 1024
SPAN = "least_loaded.pick"

tracer = trace.get_tracer("least-loaded-epp")


def headers_of(msg: pb.HttpHeaders) -> dict[str, str]:
    return {h.key.lower(): (h.raw_value.decode() if h.raw_value else h.value) for h in msg.headers.headers}


def subset_of(request: pb.ProcessingRequest) -> list[str] | None:
    namespace = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET not in namespace.fields:
        return None
    value = namespace.fields[SUBSET]
    if value.WhichOneof("kind") == "list_value":
        return [v.string_value for v in value.list_value.values]
    return [v.strip() for v in value.string_value.split(",") if v.strip()]


def error(status: int, message: str) -> pb.ProcessingResponse:
    body = json.dumps({"error": {"message": message, "type": "epp_error", "param": None, "code": status}})
    reply = pb.ImmediateResponse(status=http_status_pb2.HttpStatus(code=status), body=body.encode(),
                                 details=f"least_loaded_{status}")
    reply.headers.set_headers.append(base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key="content-type", raw_value=b"application/json")))
    return pb.ProcessingResponse(immediate_response=reply)


def decision(chosen: list[str]) -> pb.ProcessingResponse:
    value = ",".join(chosen)
    out = pb.ProcessingResponse()
    common = out.request_headers.response
    common.clear_route_cache = True
    common.header_mutation.set_headers.append(base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=DESTINATION, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD))
    out.dynamic_metadata.fields[LB].struct_value.fields[DESTINATION].string_value = value
    return out


def body_replies(body: bytes, end_of_stream: bool, response: bool = False) -> list[pb.ProcessingResponse]:
    chunks = [body[i:i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        msg = pb.ProcessingResponse()
        target = (msg.response_body if response else msg.request_body).response.body_mutation.streamed_response
        target.body = chunk
        target.end_of_stream = end_of_stream and i == len(chunks) - 1
        out.append(msg)
    return out


class Processor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: LeastLoaded, shed_header: str = ""):
        self.picker = picker
        self.shed_header = shed_header

    def _decide(self, headers: dict[str, str], subset: list[str] | None, parent) -> tuple[pb.ProcessingResponse, str]:
        """The reply to the request headers (a decision or an immediate response), and the endpoint picked."""
        with tracer.start_as_current_span(SPAN, context=parent) as span:
            if self.shed_header and self.shed_header in headers:
                return error(429, "request shed"), ""
            forced = [v.strip() for v in headers[TEST_HEADER].split(",")] if TEST_HEADER in headers else None
            try:
                chosen = self.picker.pick(subset, forced)
            except NoEndpoint as exc:
                span.set_attribute("least_loaded.error", str(exc))
                return error(503, str(exc)), ""
            span.set_attribute("least_loaded.endpoint", chosen[0])
            return decision(chosen), chosen[0]

    async def Process(self, requests, context):  # noqa: N802 (gRPC's name)
        parent = propagate.extract(dict(context.invocation_metadata()))
        body, headers, subset, picked = bytearray(), {}, None, ""
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind in ("request_headers", "request_body") and subset_of(request) is not None:
                    subset = subset_of(request)
                if kind == "request_headers":
                    headers = headers_of(request.request_headers)
                    if request.request_headers.end_of_stream:  # no body follows: decide now
                        reply, picked = self._decide(headers, subset, parent)
                        yield reply
                elif kind == "request_body" or (kind == "request_trailers" and not picked):
                    # The decision waits for the whole body: its end_of_stream, or trailers that end it.
                    ended_by_body = kind == "request_body"
                    if ended_by_body:
                        body += request.request_body.body
                        if not request.request_body.end_of_stream:
                            continue
                    reply, picked = self._decide(headers, subset, parent)
                    if not ended_by_body and not reply.HasField("immediate_response"):
                        # Trailers ended the body: the decision carries it whole (CONTINUE_AND_REPLACE) and no
                        # trailers reply follows. Streamed back, then the trailers answered, it would reach the
                        # backend twice (docs/epp-protocol.md, "Trailers, and a body sent twice").
                        common = reply.request_headers.response
                        common.status = pb.CommonResponse.CONTINUE_AND_REPLACE
                        common.body_mutation.body = bytes(body)
                        yield reply
                        continue
                    yield reply
                    if reply.HasField("immediate_response"):
                        return
                    for msg in body_replies(bytes(body), end_of_stream=True):
                        yield msg
                elif kind == "request_trailers":
                    yield pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
                elif kind == "response_headers":
                    yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
                elif kind == "response_body":
                    for msg in body_replies(request.response_body.body, request.response_body.end_of_stream,
                                            response=True):
                        yield msg
                elif kind == "response_trailers":
                    yield pb.ProcessingResponse(response_trailers=pb.TrailersResponse())
        finally:
            if picked:
                self.picker.done(picked)
