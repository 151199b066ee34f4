"""The ext_proc protocol, judged from Envoy's side: its access-log record of each request (the ext_proc
filter's call status per phase, its response details), its ext_proc counters, and what reached the backend.

Envoy runs the EPP in FULL_DUPLEX_STREAMED: it sends the request headers, then every body chunk as it
arrives (the last one with ``end_of_stream``), trailers if any; it expects one reply per phase, in the order
it asked, body replies as streamed mutations; it arms no message timeout in this mode (an EPP that never
answers holds the request until the client gives up). docs/epp-protocol.md has the whole exchange.

Every check runs with an HTTP/1.1 and an HTTP/2 (h2c) client (:func:`eppkit.conformance.suite.run_check`) and
judges only requests that were served as it intended (:mod:`eppkit.conformance.witness`): a request that
failed for another cause leaves the check not run, with that cause, never passed.
"""

from __future__ import annotations

import base64
import json

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eppkit.conformance import bodydiff
from eppkit.conformance.checks.registry import (
    ENVOY_EXT_PROC,
    NOT_RUN,
    PROTOCOL,
    SHOULD,
    Result,
    check,
    evidence_of,
    failed,
    judged,
    not_applicable,
    passed,
)
from eppkit.conformance.witness import Sent, served
from eppkit.modes import external_epp
from eppkit.observability.client import H2C
from eppkit.services.epp.protocol import HEALTH_SERVICES
from eppkit.services.pod_headers import HEADER_ECHO_BODY, RECEIVED_BODY_FIELD

SPURIOUS = "spurious_message"
BODY_MUTATION = "Normal_body_mutation"  # Envoy's details for a whole-body mutation in FULL_DUPLEX_STREAMED
GRPC_FAILED_PRECONDITION = 9  # ext_proc's call status of a reply Envoy did not ask for
# The checks of how a request is served at all: what the others need to pass first.
ORDER_NEEDS = ("reply-order", "streamed-body-mutations", "end-of-stream")
SERVES = ORDER_NEEDS + ("serves",)
# A body written in pieces, apart: Envoy hands each to the EPP as its own message (the last one carries data and
# end_of_stream in HTTP/2; HTTP/1.1 ends with an empty chunk).
PACED = {"pieces": 6, "pause_s": 0.02}


def _hung(sent: Sent) -> bool:
    """The request was never answered: the client gave up waiting (Envoy then logs it with flags DC, or not at all).
    A refusal (a 500, a 503) is an answer: its cause is read elsewhere."""
    return not sent.result.status and (sent.result.error is not None or sent.hop is None)


def _client(sent: Sent) -> str:
    return f"client: HTTP {sent.result.status}" + (f" {sent.result.error}" if sent.result.error else "")


def _out_of_order(sent: Sent) -> str | None:
    """What Envoy said when a reply came for a phase it was not waiting for (a whole-body mutation aside)."""
    hop = sent.hop
    if hop is None:
        return None
    details = str(hop["details"] or "")
    wrong = {k: v for k, v in hop.call_statuses().items() if v == GRPC_FAILED_PRECONDITION}
    if (SPURIOUS in details and BODY_MUTATION not in details) or (wrong and "request_body_last_call_status" not in wrong):
        return f"{hop['method']} {hop['path']}: Envoy answered {hop['code']} {details} ({wrong or 'no call status'})"
    return None


@check("reply-order", "replies come in the order Envoy asked for them", category=PROTOCOL, source=ENVOY_EXT_PROC)
def reply_order(h):
    """A request with a body (written whole, and in paced pieces) and one without: every ext_proc phase answered
    with its own reply, in order (call status 0), no spurious message (``spurious_msgs_received``)."""
    bed = h.bed()
    before = h.stats(bed)
    sents = h.send_all(bed, [{}, PACED, {"method": "GET"}])
    evidence = [evidence_of(s.hop) for s in sents]
    spurious = h.delta(before, h.stats(bed)).get("http.ingress.ext_proc.spurious_msgs_received", 0)
    evidence.append(f"Envoy stat http.ingress.ext_proc.spurious_msgs_received: +{spurious}")
    problems = [p for p in map(_out_of_order, sents) if p]
    if problems:
        return failed("the EPP answered out of order: " + "; ".join(problems) + ". Reply to each message in the order "
                      "Envoy sends them: request headers first (the decision), then each body chunk, then trailers "
                      "(docs/epp-protocol.md).", evidence)
    for label, sent in zip(("a request with a body", "a body in paced pieces", "GET /v1/models"), sents):
        h.must_serve(sent, label)
    return passed("every phase answered in order", evidence)


@check("streamed-body-mutations", "body replies are streamed mutations", category=PROTOCOL, source=ENVOY_EXT_PROC,
       needs=("reply-order",))
def streamed_body_mutations(h):
    """In FULL_DUPLEX_STREAMED every body reply must be ``body_mutation.streamed_response`` (Envoy refuses a
    whole-body mutation with 500 ``spurious_message:_Normal_body_mutation_response_...``)."""
    sent = h.send(h.bed())
    evidence = [evidence_of(sent.hop)]
    if sent.hop is not None and BODY_MUTATION in str(sent.hop["details"] or ""):
        return failed(f"Envoy refused the EPP's body reply ({sent.hop['code']} {sent.hop['details']}): in "
                      "FULL_DUPLEX_STREAMED a body reply is a streamed_response (body, end_of_stream), never a "
                      "whole-body mutation.", evidence)
    h.must_serve(sent, "a request with a body")
    return passed("the body came back as streamed mutations", evidence)


@check("end-of-stream", "the last body reply keeps end_of_stream", category=PROTOCOL, source=ENVOY_EXT_PROC,
       needs=("reply-order", "streamed-body-mutations"))
def end_of_stream(h):
    """The request's last body chunk goes back with ``end_of_stream``, whether it carries data (an HTTP/2 body
    in one DATA frame; the last of paced pieces) or is empty: Envoy then finishes the upstream request (its
    timeline has ``upstream_sent``). Without it the request hangs: Envoy arms no message timeout in this mode."""
    bed = h.bed()
    sents = h.send_all(bed, [{}, PACED])
    evidence = [f"{label}: {evidence_of(s.hop)}; {_client(s)}" for label, s in zip(("whole body", "paced body"), sents)]
    hung = [label for label, s in zip(("a body written whole", "a body in paced pieces"), sents) if _hung(s)]
    if hung:
        return failed(f"{' and '.join(hung)} never finished upstream (the client gave up after "
                      f"{h.request_timeout_s:g} s with no answer; Envoy's record has no upstream_sent time): echo "
                      "end_of_stream on the body reply of the chunk that carries it, also when that chunk carries data (HTTP/2 sends "
                      "a body's last data and its end in one frame).", evidence)
    for s in sents:
        h.must_serve(s, "a request with a body")
    return passed("Envoy finished the upstream request", evidence)


@check("request-without-body", "a request without a body (GET /v1/models) is answered", category=PROTOCOL,
       source=ENVOY_EXT_PROC)
def request_without_body(h):
    """``GET /v1/models``: the headers come with ``end_of_stream``; the EPP decides on them alone and the request
    is served (no body will follow: an EPP that waits for one hangs the request)."""
    sent = h.send(h.bed(), method="GET")
    evidence = [evidence_of(sent.hop), _client(sent)]
    if _hung(sent):
        return failed(f"GET /v1/models was never answered ({h.cause(sent)}): answer request headers that carry "
                      "end_of_stream at once (no body follows).", evidence)
    h.must_serve(sent, "GET /v1/models")
    return passed("served on the headers alone", evidence)


@check("serves", "a request with a body and one without are served", category=PROTOCOL, source=ENVOY_EXT_PROC,
       needs=ORDER_NEEDS + ("request-without-body",))
def serves(h):
    """The witness every other check needs: a POST with a body and a GET without reach a backend and come back
    200, every ext_proc phase's call status 0. When they do not, Envoy's record says why (the EPP refused the
    stream: call status 14; a gRPC error; a reset; a local reply)."""
    bed = h.bed()
    sents = h.send_all(bed, [{}, {"method": "GET"}])
    evidence = [evidence_of(s.hop) for s in sents]
    problems = [f"{'POST' if i == 0 else 'GET'}: {h.cause(s)}" for i, s in enumerate(sents) if not served(s)]
    return judged(problems, evidence, failing="requests through the EPP were not served",
                  passing="both served by a backend, every phase OK",
                  fix="Serve every ext_proc stream Envoy opens (its health says SERVING, so Envoy sends it "
                      "traffic).")


# Sizes the bodies are checked at: empty, one small chunk, and well past one chunk (1.2 MB of JSON goes to the
# EPP in many messages when the client writes it in pieces; written at once, Envoy may hand it over in one).
BODY_SIZES = (0, 200, 1_200_000)


def _body(size: int, model: str) -> bytes:
    """A chat request of about ``size`` bytes, written as a client might (indentation, keys in its order) and
    holding what a re-encoder of the JSON loses or changes: an integer above 2^53, a float of 17 significant
    digits, a duplicate key (the last one counts), non-ASCII text and ``\\u`` escapes."""
    if size == 0:
        return b""
    head = ('{\n  "model": %s,\n  "seed": 9007199254740993,\n  "temperature": 0.12345678901234567,\n'
            '  "max_tokens": 2,\n  "max_tokens": 1,\n  "messages": [\n    {"role": "user", "content": '
            '"h\\u00e9llo, caf\u00e9 \u4e16\u754c \\ud83d\\ude00 %s"}\n  ]\n}' % (json.dumps(model), "{filler}"))
    filler = "x" * max(1, size - len(head.replace("{filler}", "").encode()))  # one long word: one token to the mock
    return head.replace("{filler}", filler).encode()


def _bodies_sent(h) -> tuple[list[tuple[str, bytes, Sent]], list[str]]:
    """Bodies of 0 B, 200 B and 1.2 MB (written whole, and in 20 paced pieces: many messages to the EPP) sent
    through the EPP, the mock asked to echo what it received: (label, the client's bytes, the request) of each one
    the backend was sent, and evidence of those the EPP refused itself (its own 4xx: not judged). A body neither
    refused nor served leaves the check not run (NotWitnessed)."""
    bed = h.bed()
    forms = [(size, 1) for size in BODY_SIZES] + [(BODY_SIZES[-1], 20)]
    bodies = [_body(size, bed.backends[0].model) for size, _ in forms]
    sents = h.send_all(bed, [{"raw_body": data, "pieces": pieces, "pause_s": 0.01 if pieces > 1 else 0.0,
                              "headers": {HEADER_ECHO_BODY: "1"}}
                             for data, (_, pieces) in zip(bodies, forms)])
    out, refused = [], []
    for (size, pieces), data, sent in zip(forms, bodies, sents):
        result, hop = sent.result, sent.hop
        got = h.body_digest(result)
        label = f"{size:,} B" + (f" in {pieces} pieces" if pieces > 1 else "")
        if got is None and hop is not None and str(hop["details"] or "").startswith("epp_") or (
                got is None and 400 <= result.status < 500 and h.served_by(result) is None):
            refused.append(f"{label}: the EPP refused it itself (HTTP {result.status}): not judged")
            continue
        if got is None:
            h.must_serve(Sent(result, hop, h.protocol), f"a {label} body", status=result.status or 200)
        out.append((label, data, sent))
    return out, refused


def _arrived(h, label: str, data: bytes, sent: Sent, evidence: list[str]) -> bodydiff.Arrival:
    """How ``data`` reached the backend (eppkit.conformance.bodydiff.arrival), from the mock's answer: its digest,
    length and copy of what it received, its status; said in ``evidence``."""
    result = sent.result
    got, length = h.body_digest(result), h.body_length(result)
    evidence.append(f"{label}: client sent {len(data):,} B, sha256 {h.digest(data)[:16]}…; backend received "
                    + (f"{length:,} B, " if length is not None else "") + f"sha256 {(got or 'nothing')[:16]}…")
    if got is None:
        return bodydiff.Arrival(bodydiff.LOST, "", f"nothing arrived (HTTP {result.status})")
    if got == h.digest(data):
        return bodydiff.Arrival(bodydiff.SAME, bodydiff.byte_counts(len(data), len(data)), "the same bytes")
    error = result.body.get("error") if isinstance(result.body, dict) else None
    found = bodydiff.arrival(data, _received(result), got_bytes=length, status=result.status,
                             said=str(error.get("message", ""))[:200] if isinstance(error, dict) else "")
    evidence += [f"{label}: {line}" for line in (found.counts, found.where, found.how) if line]
    return found


def _said(how: str, bodies: list[tuple[str, bodydiff.Arrival]]) -> str:
    """Bodies that arrived alike: each named with the bytes that arrived of it, what became of their values, and
    where the first one first differs."""
    counts = {found.counts for _, found in bodies}
    if len(counts) == 1:
        said = ", ".join(label for label, _ in bodies) + ": " + "; ".join(filter(None, (counts.pop(), how)))
    else:
        said = ", ".join(f"{label} ({found.counts})" if found.counts else label for label, found in bodies) + f": {how}"
    where = bodies[0][1].where
    return said + (f"; {where}" if where else "")


@check("body-values-kept", "every JSON value of a body reaches the backend as the client wrote it",
       category=PROTOCOL, source=ENVOY_EXT_PROC, needs=SERVES)
def body_values_kept(h):
    """Bodies of 0 B, 200 B and 1.2 MB (written whole, and in 20 paced pieces) through the EPP, each holding what a
    JSON re-encoder loses or changes (an integer above 2^53, a float of 17 significant digits, a duplicate key,
    non-ASCII text, ``\\u`` escapes): the backend receives the same bytes (the mock's ``x-mock-request-sha256``),
    or other bytes that still say every value, duplicate key and text the client's did (read exactly: numbers as
    decimals; the mock echoes what it received, on an error answer too). Data lost on the way fails, with the bytes
    that arrived of the client's (``x-mock-request-bytes``) and the first difference: a body cut short, no longer
    JSON, answered with an error, a value lost or changed. An EPP that refuses a body (its own 4xx) is not judged
    on it."""
    bodies, evidence = _bodies_sent(h)
    lost: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}  # what became of the values -> the bodies it befell
    unread = []
    for label, data, sent in bodies:
        found = _arrived(h, label, data, sent, evidence)
        if found.kind == bodydiff.LOST:
            lost.setdefault(found.how, []).append((label, found))
        elif found.kind == bodydiff.UNREAD:
            unread.append(label)
    if lost:
        return failed("the backend did not receive what the client sent: " + "; ".join(
            _said(how, group) for how, group in lost.items()) + ". Echo every chunk's bytes unchanged, each to the "
            "body's end (cut, hold back or drop none); never read the JSON into floats or a map and write it again.",
            evidence)
    if unread:  # as many bytes as the client sent (where the backend says), served: nothing says a value was lost
        return Result(NOT_RUN, f"{', '.join(unread)} arrived as other bytes, which the backend served, and its copy "
                      "of them is not in its answer (x-mock-echo-body): their values could not be read", evidence)
    if not bodies:
        return failed("the EPP refused every body size, the backend received none", evidence)
    return passed(f"{len(bodies)} bodies arrived with every value kept", evidence)


# What a re-encoding that keeps every value still costs: named in bodies-byte-for-byte's failure.
REENCODING_RISK = ("The risk: anything keyed on the body's bytes no longer matches (a request signature or digest, "
                   "a prefix cache keyed on the prompt's bytes), and a re-encoder keeps only the values it can hold "
                   "(one that reads numbers into float64 or keys into a map loses what these bodies did not carry)")


@check("bodies-byte-for-byte", "bodies from 0 B to well past a chunk arrive upstream byte for byte",
       category=PROTOCOL, level=SHOULD, source=ENVOY_EXT_PROC, needs=SERVES + ("body-values-kept",))
def bodies_byte_for_byte(h):
    """The same bodies as ``body-values-kept``, sent again: the sha256 of what the backend received equals the
    client's, byte for byte (key order, spacing and escapes as the client wrote them). An EPP that re-encodes the
    JSON and keeps every value fails this *should*, its risk named; one that loses a value fails the *must* (and
    here, sent again, is said to have lost it: never called a re-encoding)."""
    bodies, evidence = _bodies_sent(h)
    found: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}
    for label, data, sent in bodies:
        arrived = _arrived(h, label, data, sent, evidence)
        if arrived.kind != bodydiff.SAME:
            found.setdefault(arrived.kind, []).append((label, arrived))
    said = []
    if found.get(bodydiff.REENCODED):
        said.append(f"{', '.join(label for label, _ in found[bodydiff.REENCODED])} reached the backend re-encoded, as "
                    f"other bytes than the client sent that say every value the same. {REENCODING_RISK}")
    lost: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}
    for label, arrived in found.get(bodydiff.LOST, []):
        lost.setdefault(arrived.how, []).append((label, arrived))
    said += [f"data lost on the way: {_said(how, group)}" for how, group in lost.items()]
    said += [f"{label}: {a.how}" for label, a in found.get(bodydiff.UNREAD, [])]
    if said:
        return failed(". ".join(said) + ". Echo every chunk's bytes unchanged.", evidence)
    if not bodies:
        return failed("the EPP refused every body size, the backend received none", evidence)
    return passed(f"{len(bodies)} bodies arrived byte for byte", evidence)


def _received(result) -> bytes | None:
    """The body the mock received, from its answer (``x-mock-echo-body``), or None."""
    field = result.body.get(RECEIVED_BODY_FIELD) if isinstance(result.body, dict) else None
    try:
        return base64.b64decode(field) if isinstance(field, str) else None
    except ValueError:
        return None


TRAILER = {"x-eppkit-trailer": "1"}


@check("trailers", "request trailers are answered", category=PROTOCOL, source=ENVOY_EXT_PROC, needs=SERVES)
def trailers(h):
    """An HTTP/2 request whose body is followed by trailers: Envoy sends the body without ``end_of_stream``, then
    ``request_trailers``; the EPP answers them (a trailers reply, or the whole body with CONTINUE_AND_REPLACE)
    and the request is served. An EPP that never answers the trailers hangs it. (Envoy drops HTTP/1.1
    trailers before any filter: that protocol has none to send.)"""
    if h.protocol != H2C:
        return not_applicable("Envoy drops HTTP/1.1 request trailers before any filter (no enable_trailers)")
    bed = h.bed()
    sent = h.send(bed, trailers=TRAILER)
    evidence = [evidence_of(sent.hop), _client(sent)]
    if _hung(sent):
        return failed(f"a request with trailers never finished ({h.cause(sent)}): answer request_trailers (an empty "
                      "trailers reply will do) or end the body with CONTINUE_AND_REPLACE.", evidence)
    if sent.served_by is None:
        h.must_serve(sent, "a request with trailers")
    return passed("the trailers were answered and the request served", evidence)


@check("trailers-body-once", "a body followed by trailers reaches the backend once", category=PROTOCOL,
       level=SHOULD, source="Envoy ext_proc with a retry policy (envoyproxy/envoy#45470)",
       needs=SERVES + ("bodies-byte-for-byte", "trailers"))
def trailers_body_once(h):
    """An HTTP/2 body followed by trailers, through a route with a retry policy (the kit's picked route, as a
    gateway's usually has): the backend receives it once, byte for byte. Envoy 1.36-1.40 keeps a copy of a
    streamed-back body for retries and sends it again when the EPP's trailers reply resumes the request
    (envoyproxy/envoy#45470): an EPP that streams the body back and then answers the trailers gets it to the
    backend twice. One that replies to the body's end with CONTINUE_AND_REPLACE and the whole body does not."""
    if h.protocol != H2C:
        return not_applicable("Envoy drops HTTP/1.1 request trailers before any filter (no enable_trailers)")
    bed = h.bed()
    data = _body(200, bed.backends[0].model)
    result = h.chat(bed, raw_body=data, trailers=TRAILER)
    sent = Sent(result, h.hop(bed, result), h.protocol)
    got = h.body_digest(result)
    evidence = [evidence_of(sent.hop), f"client: HTTP {result.status}: {str(result.body)[:200]}"]
    if got is None and sent.served_by is None:
        h.must_serve(sent, "a request with trailers")
    if got != h.digest(data):
        version = getattr(h.envoy_binary, "version", "this Envoy")
        length = h.body_length(result)
        counts = f"{bodydiff.byte_counts(len(data), length)}, " if length is not None else ""
        return failed(f"the backend received the body {'twice' if 'Extra data' in str(result.body) else 'changed'} "
                      f"({counts}HTTP {result.status}): Envoy {version} resends the body it keeps for retries when "
                      "the EPP's trailers reply resumes the request (envoyproxy/envoy#45470, 1.36-1.40; "
                      "docs/epp-protocol.md, Trailers). Reply to the request's last body message with "
                      "CONTINUE_AND_REPLACE carrying the whole body instead of streaming it back and answering the "
                      "trailers.", evidence)
    return passed("the body arrived once, byte for byte", evidence)


@check("cancelled-request", "a request cancelled mid-body leaves the EPP serving", category=PROTOCOL, level=SHOULD,
       source=ENVOY_EXT_PROC, needs=SERVES)
def cancelled_request(h):
    """An HTTP/2 client resets its stream half-way through the body: Envoy records the reset and closes the EPP's
    stream; once Envoy has logged it, the next requests, one at a time, are served (the EPP let go of the cancelled
    stream)."""
    if h.protocol != H2C:
        return not_applicable("the kit's HTTP/1.1 client does not cancel half-way (HTTP/2: a stream reset)")
    bed = h.bed()
    cancelled = h.chat(bed, pieces=4, pause_s=0.05, cancel_after=2, prompt="cancel me " * 50)
    logged = h.hop(bed, cancelled)  # Envoy has closed the request, and with it the EPP's stream
    after = [h.send(bed) for _ in range(3)]
    evidence = [f"cancelled: {cancelled.error}; {evidence_of(logged)}"] + [evidence_of(s.hop) for s in after]
    for s in after:
        if not served(s):
            return failed(f"after a cancelled request the EPP did not serve the next one: {h.cause(s)}", evidence)
    return passed("the next requests were served", evidence)


def _health_address(bed) -> tuple[str, int] | None:
    """Where the EPP serves grpc.health.v1: its health port, else its gRPC port."""
    epp_address = bed.topology.options.get("epp_address")
    if epp_address:
        return external_epp.split_address(epp_address)
    handle = bed.services.get("epp")
    if handle is None or handle.spec is None:
        return None
    return handle.spec.host, handle.spec.grpc_health_port or handle.spec.port


@check("health-services", "gRPC health serves liveness, readiness and the ext_proc service", category=PROTOCOL,
       needs=("serves",), per_protocol=False)
def health_services(h):
    """grpc.health.v1 on the EPP's health port (else its gRPC port) answers SERVING for ``liveness``,
    ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor`` (the protocol's health checking), and the
    EPP serves while it says so (``serves``)."""
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
       level=SHOULD, source=ENVOY_EXT_PROC, needs=SERVES)
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
