"""Building and reading ext_proc messages (envoy.service.ext_proc.v3) the way the EPP protocol uses them.

The EPP protocol of the Gateway API Inference Extension, as spoken here:
- the chosen endpoint goes into the request header ``x-gateway-destination-endpoint`` and into the
  dynamic metadata ``envoy.lb`` / ``x-gateway-destination-endpoint``, the same value in both: the
  primary, then comma-separated fallbacks, which Envoy's "picked" cluster tries in order;
- the headers response asks Envoy to clear its route cache, so the route is matched again
  now that the decision exists;
- in FULL_DUPLEX_STREAMED the body goes back as ``streamed_response`` chunks; the last one
  carries ``end_of_stream``; in BUFFERED the decision answers the one body message (the body itself unchanged);
  with no body sent (NONE) it answers the headers.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from eppkit.services.openai_errors import error_body
from eppkit.services.picker import headers
from google.protobuf import struct_pb2

# The gRPC health services an EPP serves (grpc.health.v1): the server as a whole (""), and the three the
# EPP protocol names (GAIE's protocol doc, "Health Checking"): liveness, readiness, the ext_proc service.
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
HEALTH_SERVICES = ("", "liveness", "readiness", EXT_PROC_SERVICE)

MAX_MESSAGE_BYTES = 80 * 1024 * 1024  # above Envoy's 64 MiB per-connection buffer limit
# An ext_proc server's gRPC options (the kit's EPP and the echo EPP): Envoy sends the request body in
# FULL_DUPLEX_STREAMED as fast as it arrives, several MiB in one message when the client writes quickly, and gRPC's
# default 4 MiB receive limit turned any larger body into a 500 ("Received message larger than max"). No BDP probe:
# gRPC's bandwidth-delay estimator pings on the stream's reads, and on a loopback stream of small messages that is
# work on every message (bench.epp_hop, 2026-11-27: the echo EPP's hold 1.37 → 1.13 ms p50 without it).
SERVER_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                  ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.http2.bdp_probe", 0))

METADATA_NAMESPACE = headers.LB_METADATA
METADATA_KEY = headers.DESTINATION

# Envoy's ext_proc stream closes the gRPC stream early and our message size stays modest;
# send bodies back in chunks no larger than this.
MAX_CHUNK = 1 << 20


def subset_hint(request: pb.ProcessingRequest) -> tuple[str, ...] | None:
    """The data plane's subset hint in a request's metadata (``envoy.lb.subset_hint`` /
    ``x-gateway-destination-endpoint-subset``): a list of "ip:port", or one comma-separated string;
    None when the message carries none."""
    namespace = request.metadata_context.filter_metadata.get(headers.SUBSET_METADATA)
    if namespace is None or headers.SUBSET not in namespace.fields:
        return None
    value = namespace.fields[headers.SUBSET]
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        items = [v.string_value for v in value.list_value.values if v.WhichOneof("kind") == "string_value"]
    elif kind == "string_value":
        items = value.string_value.split(",")
    else:
        items = []
    return tuple(item.strip() for item in items if item.strip())


def header_map(headers: base_pb2.HeaderMap) -> dict[str, str]:
    """HeaderMap -> {lower-case name: value}; Envoy fills ``raw_value`` (bytes), older ones ``value``."""
    out: dict[str, str] = {}
    for h in headers.headers:
        value = h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value
        key = h.key.lower()
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


def _set_header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def headers_response(
    set_headers: Mapping[str, str] | None = None,
    *,
    remove_headers: Iterable[str] = (),
    metadata: Mapping[str, Mapping[str, str]] | None = None,
    clear_route_cache: bool = False,
    response_path: bool = False,
    replace_body: bytes | None = None,
    to_body: bool = False,
) -> pb.ProcessingResponse:
    """A HeadersResponse (request or response path) with header mutations and dynamic metadata; with
    ``replace_body``, CONTINUE_AND_REPLACE: the body is that, whole, and Envoy asks nothing more of this path.
    ``to_body``: the same as the answer to the request's body message (a BUFFERED body: Envoy holds the headers
    until the body is answered, so the mutation and the new route still apply to them)."""
    common = pb.CommonResponse(clear_route_cache=clear_route_cache)
    if replace_body is not None:
        common.status = pb.CommonResponse.CONTINUE_AND_REPLACE
        common.body_mutation.body = replace_body
    if set_headers:
        common.header_mutation.set_headers.extend(_set_header(k, v) for k, v in set_headers.items())
    common.header_mutation.remove_headers.extend(remove_headers)
    msg = pb.ProcessingResponse()
    target = msg.response_headers if response_path else msg.request_body if to_body else msg.request_headers
    target.response.CopyFrom(common)
    if metadata:
        msg.dynamic_metadata.CopyFrom(dynamic_metadata(metadata))
    return msg


def dynamic_metadata(namespaces: Mapping[str, Mapping[str, str]]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    for namespace, values in namespaces.items():
        inner = out.fields[namespace].struct_value
        for key, value in values.items():
            inner.fields[key].string_value = value
    return out


def body_responses(body: bytes, *, end_of_stream: bool, response_path: bool = False) -> list[pb.ProcessingResponse]:
    """The body sent back as streamed chunks; only the last chunk may carry end_of_stream.

    An empty body still needs one message when it ends the stream.
    """
    chunks = [body[i : i + MAX_CHUNK] for i in range(0, len(body), MAX_CHUNK)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        msg = pb.ProcessingResponse()
        target = msg.response_body if response_path else msg.request_body
        target.response.body_mutation.streamed_response.body = chunk
        target.response.body_mutation.streamed_response.end_of_stream = end_of_stream and i == len(chunks) - 1
        out.append(msg)
    return out


def trailers_response(response_path: bool = False) -> pb.ProcessingResponse:
    msg = pb.ProcessingResponse()
    (msg.response_trailers if response_path else msg.request_trailers).SetInParent()
    return msg


def immediate_response(
    status: int, message: str, *, code: str, extra_headers: Iterable[tuple[str, str]] = ()
) -> pb.ProcessingResponse:
    """A local reply with an OpenAI-style JSON error body."""
    body = json.dumps(error_body(status, message, code=code)).encode()
    resp = pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        body=body,
        details=f"epp_{code}",
    )
    resp.headers.set_headers.append(_set_header("content-type", "application/json"))
    for k, v in extra_headers:
        resp.headers.set_headers.append(_set_header(k, v))
    return pb.ProcessingResponse(immediate_response=resp)
