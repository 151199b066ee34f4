"""The ext_proc protocol, judged from Envoy's side: its access-log record of each request (the ext_proc
filter's call status per phase, its response details), its ext_proc counters, and what reached the backend.

Envoy runs the EPP in FULL_DUPLEX_STREAMED: it sends the request headers, then every body chunk as it
arrives (the last one with ``end_of_stream``), trailers if any; it expects one reply per phase, in the order
it asked, body replies as streamed mutations; it arms no message timeout in this mode (an EPP that never
answers holds the request until the client gives up). docs/epp-protocol.md has the whole exchange.
"""

from __future__ import annotations

import json

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eppkit.conformance.checks.registry import (
    ENVOY_EXT_PROC,
    PROTOCOL,
    SHOULD,
    check,
    evidence_of,
    failed,
    not_applicable,
    passed,
)
from eppkit.modes import external_epp
from eppkit.services.epp.protocol import HEALTH_SERVICES

SPURIOUS = "spurious_message"
BODY_MUTATION = "Normal_body_mutation"  # Envoy's details for a whole-body mutation in FULL_DUPLEX_STREAMED
GRPC_FAILED_PRECONDITION = 9  # ext_proc's call status of a reply Envoy did not ask for
ORDER_NEEDS = ("reply-order", "streamed-body-mutations", "end-of-stream")


def _post(h, bed=None, **kw):
    bed = bed or h.bed()
    result = h.chat(bed, **kw)
    return result, h.hop(bed, result)


@check("reply-order", "replies come in the order Envoy asked for them", category=PROTOCOL, source=ENVOY_EXT_PROC)
def reply_order(h):
    """A request with a body and one without: every ext_proc phase answered with its own reply, in order
    (call status 0), no spurious message (``http.ingress.ext_proc.spurious_msgs_received``)."""
    bed = h.bed()
    before = h.stats(bed)
    evidence, problems = [], []
    without_body = h.get(bed)
    for result, hop in (_post(h, bed), (without_body, h.hop(bed, without_body))):
        evidence.append(evidence_of(hop))
        if hop is None:
            continue
        details = str(hop["details"] or "")
        out_of_order = {k: v for k, v in hop.call_statuses().items() if v == GRPC_FAILED_PRECONDITION}
        if (SPURIOUS in details and BODY_MUTATION not in details) or (
                out_of_order and "request_body_last_call_status" not in out_of_order):
            problems.append(f"{hop['method']} {hop['path']}: Envoy answered {hop['code']} {details}: a reply came "
                            f"for a phase Envoy was not waiting for ({out_of_order})")
    spurious = h.delta(before, h.stats(bed)).get("http.ingress.ext_proc.spurious_msgs_received", 0)
    evidence.append(f"Envoy stat http.ingress.ext_proc.spurious_msgs_received: +{spurious}")
    if problems:
        return failed("the EPP answered out of order: " + "; ".join(problems) +
                      ". Reply to each message in the order Envoy sends them: request headers, each body chunk, "
                      "trailers (docs/epp-protocol.md).", evidence)
    return passed("every phase answered in order", evidence)


@check("streamed-body-mutations", "body replies are streamed mutations", category=PROTOCOL, source=ENVOY_EXT_PROC,
       needs=("reply-order",))
def streamed_body_mutations(h):
    """In FULL_DUPLEX_STREAMED every body reply must be ``body_mutation.streamed_response`` (Envoy refuses a
    whole-body mutation with 500 ``spurious_message:_Normal_body_mutation_response_...``)."""
    result, hop = _post(h)
    evidence = [evidence_of(hop)]
    if hop is not None and BODY_MUTATION in str(hop["details"] or ""):
        return failed(f"Envoy refused the EPP's body reply ({hop['code']} {hop['details']}): in FULL_DUPLEX_STREAMED "
                      "a body reply is a streamed_response (body, end_of_stream), never a whole-body mutation.", evidence)
    return passed("the body came back as streamed mutations", evidence)


@check("end-of-stream", "the last body reply keeps end_of_stream", category=PROTOCOL, source=ENVOY_EXT_PROC,
       needs=("reply-order", "streamed-body-mutations"))
def end_of_stream(h):
    """The request's last body chunk goes back with ``end_of_stream``: Envoy then finishes the upstream
    request (its timeline has ``upstream_sent``) and the response comes back. Without it the request hangs:
    Envoy arms no message timeout in this mode."""
    result, hop = _post(h)
    evidence = [evidence_of(hop), f"client: HTTP {result.status}{' ' + result.error if result.error else ''}"]
    if hop is None or hop["upstream_sent_us"] in (None, "-") or result.error:
        return failed(f"the request never finished upstream (the client gave up after {h.request_timeout_s:g} s; "
                      "Envoy's record has no upstream_sent time): echo the last body chunk with end_of_stream: true.",
                      evidence)
    return passed("Envoy finished the upstream request", evidence)


@check("request-without-body", "a request without a body (GET /v1/models) is answered", category=PROTOCOL,
       source=ENVOY_EXT_PROC)
def request_without_body(h):
    """``GET /v1/models``: the headers come with ``end_of_stream``; the EPP decides on them alone and the request
    is served (no body will follow: an EPP that waits for one hangs the request)."""
    bed = h.bed()
    result = h.get(bed)
    hop = h.hop(bed, result)
    evidence = [evidence_of(hop), f"client: HTTP {result.status}{' ' + result.error if result.error else ''}"]
    if result.status != 200:
        return failed(f"GET /v1/models got {result.status or result.error}: answer request headers that carry "
                      "end_of_stream at once (no body follows).", evidence)
    return passed("served on the headers alone", evidence)


# Sizes the bodies are checked at: empty, one small chunk, and well past one chunk (Envoy sends a big body
# in many chunks of what the client wrote; 1.2 MB of JSON is ~20 of Envoy's 64 KiB reads).
BODY_SIZES = (0, 200, 1_200_000)


def _body(size: int, model: str) -> bytes:
    """A chat request of about ``size`` bytes, written as a client might (indentation, keys in its order): an
    EPP that re-encodes the JSON changes it."""
    if size == 0:
        return b""
    head = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": ""}]}
    filler = "x" * max(1, size - len(json.dumps(head, indent=2)))
    head["messages"][0]["content"] = filler  # one long word: one token to the mock
    return json.dumps(head, indent=2).encode()


@check("bodies-byte-for-byte", "bodies from 0 B to well past a chunk arrive upstream byte for byte",
       category=PROTOCOL, source=ENVOY_EXT_PROC, needs=ORDER_NEEDS + ("request-without-body",))
def bodies_byte_for_byte(h):
    """Bodies of 0 B, 200 B and 1.2 MB (many chunks) through the EPP: the sha256 of what the backend received
    (the mock's ``x-mock-request-sha256``) equals the client's. An EPP that refuses a body (its own 4xx) is
    not judged on it."""
    bed = h.bed()
    evidence, problems, judged = [], [], 0
    for size in BODY_SIZES:
        data = _body(size, bed.backends[0].model)
        result = h.chat(bed, raw_body=data)
        got = h.body_digest(result)
        hop = h.hop(bed, result)
        if got is None and hop is not None and str(hop["details"] or "").startswith("epp_") or (
                got is None and 400 <= result.status < 500 and h.served_by(result) is None):
            evidence.append(f"{size} B: the EPP refused it itself (HTTP {result.status}): not judged")
            continue
        judged += 1
        sent = h.digest(data)
        evidence.append(f"{size} B: client sha256 {sent[:16]}…, backend received {(got or 'nothing')[:16]}…")
        if got != sent:
            problems.append(f"{size} B arrived {'changed' if got else 'not at all'} (HTTP {result.status})")
    if problems:
        return failed("the body did not reach the backend as the client sent it: " + "; ".join(problems) +
                      ". Echo every chunk's bytes unchanged (do not re-encode the JSON).", evidence)
    if not judged:
        return failed("the EPP refused every body size, the backend received none", evidence)
    return passed(f"{judged} body sizes arrived byte for byte", evidence)


@check("response-phases", "a streamed response passes through the EPP's response phases", category=PROTOCOL,
       source=ENVOY_EXT_PROC, needs=ORDER_NEEDS)
def response_phases(h):
    """With response processing on (response headers SEND, body FULL_DUPLEX_STREAMED): a streamed chat request
    gets every token and ``[DONE]``, the response phases' call status is 0, and the served endpoint reaches
    the EPP (``envoy.lb`` metadata; an EPP that echoes it as ``x-conformance-test-served-endpoint``, as GAIE's
    conformance EPP does, is checked against what Envoy served)."""
    bed = h.bed("responses", epp_process_response=True)
    result = h.chat(bed, stream=True, max_tokens=8)
    hop = h.hop(bed, result)
    evidence = [evidence_of(hop), f"client: HTTP {result.status}, {len(result.tokens)} tokens, "
                f"[DONE] {'seen' if result.events and result.events[-1].get('done') else 'missing'}"
                + (f", error {result.error}" if result.error else "")]
    complete = result.status == 200 and result.events and result.events[-1].get("done") and len(result.tokens) == 8
    bad = {k: v for k, v in (hop.call_statuses() if hop else {}).items() if k.startswith("response") and v != 0}
    if not complete or bad or hop is None:
        return failed("the streamed response did not come through whole" + (f" (response call status {bad})" if bad
                      else "") + ": answer response headers, and echo each response body chunk at once with its "
                      "end_of_stream.", evidence)
    echoed = result.headers.get("x-conformance-test-served-endpoint")
    if echoed is not None:
        evidence.append(f"the EPP echoed the served endpoint {echoed!r}; Envoy served {hop['upstream']!r}")
        if echoed != hop["upstream"]:
            return failed("the served endpoint the EPP saw is not the one Envoy served", evidence)
    return passed("the response streamed through the EPP" + (" and the served endpoint reached it" if echoed else ""),
                  evidence)


@check("same-destination", "the header and the metadata name the same destination", category=PROTOCOL,
       needs=("reply-order", "streamed-body-mutations"))
def same_destination(h):
    """``x-gateway-destination-endpoint`` and ``envoy.lb`` / ``x-gateway-destination-endpoint`` carry the same
    value (the protocol: precedence between them is undefined; Envoy's picked route reads the metadata)."""
    bed = h.bed()
    evidence, problems = [], []
    for _ in range(3):
        result, hop = _post(h, bed)
        evidence.append(evidence_of(hop))
        if hop is None or not hop["destination"]:
            continue
        if hop["destination"] != hop["destination_header"]:
            problems.append(f"metadata {hop['destination']!r}, header {hop['destination_header']!r}")
    if problems:
        return failed("the EPP named different destinations: " + "; ".join(problems) +
                      ". Set the header and the metadata to the same value.", evidence)
    if not any('"destination"' in e for e in evidence):
        return failed("the EPP named no destination in 3 requests (no envoy.lb metadata)", evidence)
    return passed("header and metadata agree", evidence)


def _health_address(bed) -> tuple[str, int] | None:
    """Where the EPP serves grpc.health.v1: its health port, else its gRPC port."""
    epp_address = bed.topology.options.get("epp_address")
    if epp_address:
        return external_epp.split_address(epp_address)
    handle = bed.services.get("epp")
    if handle is None or handle.spec is None:
        return None
    return handle.spec.host, handle.spec.grpc_health_port or handle.spec.port


@check("health-services", "gRPC health serves liveness, readiness and the ext_proc service", category=PROTOCOL)
def health_services(h):
    """grpc.health.v1 on the EPP's health port (else its gRPC port) answers SERVING for ``liveness``,
    ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor`` (the protocol's health checking)."""
    address = _health_address(h.bed())
    if address is None:
        return not_applicable("the EPP's address is not known to the kit")
    evidence, problems = [], []
    with grpc.insecure_channel(f"{address[0]}:{address[1]}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in HEALTH_SERVICES:
            try:
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(
                    stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=3).status)
            except grpc.RpcError as exc:
                status = exc.code().name
            evidence.append(f"grpc.health.v1 Check({service!r}) at {address[0]}:{address[1]}: {status}")
            if service and status != "SERVING":
                problems.append(f"{service}: {status}")
    if problems:
        return failed("health services missing or not serving: " + ", ".join(problems), evidence)
    return passed("all three serve", evidence)


CONCURRENT = 16


@check("concurrent-streams", f"{CONCURRENT} concurrent streams without an error", category=PROTOCOL,
       level=SHOULD, source=ENVOY_EXT_PROC, needs=ORDER_NEEDS)
def concurrent_streams(h):
    """Sixteen requests at once, each its own ext_proc stream: every one served, no stream failed or reset by
    the EPP (``streams_failed``, ``spurious_msgs_received``)."""
    bed = h.bed()
    before = h.stats(bed)
    results = h.concurrently(bed, CONCURRENT, lambda: h.chat(bed))
    delta = h.delta(before, h.stats(bed))
    codes: dict[int, int] = {}
    for r in results:
        codes[r.status] = codes.get(r.status, 0) + 1
    evidence = [f"HTTP statuses {codes}", f"Envoy ext_proc stats (delta): {delta}"]
    failed_streams = delta.get("http.ingress.ext_proc.streams_failed", 0)
    if codes.get(200, 0) != CONCURRENT or failed_streams:
        bad = next((r for r in results if r.status != 200), None)
        if bad is not None:
            evidence.append(evidence_of(h.hop(bed, bad)))
        return failed(f"{CONCURRENT - codes.get(200, 0)} of {CONCURRENT} concurrent requests failed "
                      f"({failed_streams} ext_proc streams failed): serve every stream Envoy opens at once.", evidence)
    return passed(f"{CONCURRENT} of {CONCURRENT} served", evidence)
