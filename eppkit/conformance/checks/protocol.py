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

from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eppkit.conformance import bodydiff
from eppkit.conformance.checks._bodies import PIECES, SIZES, bodies_sent, body, how_it_arrived, said_of  # noqa: F401  (PIECES, SIZES: the body rules say them)
from eppkit.conformance.registry import ONE_RUN, SERVED, check
from eppkit.conformance.results import (
    ENVOY_EXT_PROC,
    NOT_RUN,
    PROTOCOL,
    SHOULD,
    Result,
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

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

SPURIOUS = "spurious_message"
BODY_MUTATION = "Normal_body_mutation"  # Envoy's details for a whole-body mutation in FULL_DUPLEX_STREAMED
GRPC_FAILED_PRECONDITION = 9  # ext_proc's call status of a reply Envoy did not ask for
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
    if ((SPURIOUS in details and BODY_MUTATION not in details)
            or (wrong and "request_body_last_call_status" not in wrong)):
        return f"{hop['method']} {hop['path']}: Envoy answered {hop['code']} {details} ({wrong or 'no call status'})"
    return None


@check("reply-order", "replies come in the order Envoy asked for them", category=PROTOCOL, source=ENVOY_EXT_PROC)
def reply_order(h: EppHarness) -> Result:
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
def streamed_body_mutations(h: EppHarness) -> Result:
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
def end_of_stream(h: EppHarness) -> Result:
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
                      "end_of_stream on the body reply of the chunk that carries it, also when that chunk carries data "
                      "(HTTP/2 sends a body's last data and its end in one frame).", evidence)
    for s in sents:
        h.must_serve(s, "a request with a body")
    return passed("Envoy finished the upstream request", evidence)


@check("request-without-body", "a request without a body (GET /v1/models) is answered", category=PROTOCOL,
       source=ENVOY_EXT_PROC)
def request_without_body(h: EppHarness) -> Result:
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
       needs=("reply-order", "streamed-body-mutations", "end-of-stream", "request-without-body"))
def serves(h: EppHarness) -> Result:
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


@check("body-values-kept", "every JSON value of a body reaches the backend as the client wrote it",
       category=PROTOCOL, source=ENVOY_EXT_PROC, needs=SERVED)
def body_values_kept(h: EppHarness) -> Result:
    """Bodies of {SIZES} (written whole, and in {PIECES} paced pieces) through the EPP, each holding what a
    JSON re-encoder loses or changes (an integer above 2^53, a float of 17 significant digits, a duplicate key,
    non-ASCII text, ``\\u`` escapes): the backend receives the same bytes (the mock's ``x-mock-request-sha256``),
    or other bytes that still say every value, duplicate key and text the client's did (read exactly: numbers as
    decimals; the mock echoes what it received, on an error answer too). Data lost on the way fails, with the bytes
    that arrived of the client's (``x-mock-request-bytes``) and the first difference: a body cut short, no longer
    JSON, answered with an error, a value lost or changed. An EPP that refuses a body (its own 4xx) is not judged
    on it."""
    sent_round = bodies_sent(h)
    bodies, evidence = sent_round.arrived, sent_round.evidence
    lost: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}  # what became of the values -> the bodies it befell
    unread = []
    for label, data, sent in bodies:
        found = how_it_arrived(h, label, data, sent, evidence)
        if found.kind == bodydiff.LOST:
            lost.setdefault(found.how, []).append((label, found))
        elif found.kind == bodydiff.UNREAD:
            unread.append(label)
    if lost:
        return failed("the backend did not receive what the client sent: " + "; ".join(
            said_of(how, group) for how, group in lost.items()) + sent_round.also_unserved(h) + ". Echo every "
            "chunk's bytes unchanged, each to the body's end (cut, hold back or drop none); never read the JSON into "
            "floats or a map and write it again.", evidence)
    sent_round.witnessed(h)
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
       category=PROTOCOL, level=SHOULD, source=ENVOY_EXT_PROC, needs=SERVED + ("body-values-kept",))
def bodies_byte_for_byte(h: EppHarness) -> Result:
    """The same bodies as ``body-values-kept``, sent again: the sha256 of what the backend received equals the
    client's, byte for byte (key order, spacing and escapes as the client wrote them). An EPP that re-encodes the
    JSON and keeps every value fails this *should*, its risk named; one that loses a value fails the *must* (and
    here, sent again, is said to have lost it: never called a re-encoding)."""
    sent_round = bodies_sent(h)
    bodies, evidence = sent_round.arrived, sent_round.evidence
    found: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}
    for label, data, sent in bodies:
        reached = how_it_arrived(h, label, data, sent, evidence)
        if reached.kind != bodydiff.SAME:
            found.setdefault(reached.kind, []).append((label, reached))
    said = []
    if found.get(bodydiff.REENCODED):
        said.append(f"{', '.join(label for label, _ in found[bodydiff.REENCODED])} reached the backend re-encoded, as "
                    f"other bytes than the client sent that say every value the same. {REENCODING_RISK}")
    lost: dict[str, list[tuple[str, bodydiff.Arrival]]] = {}
    for label, reached in found.get(bodydiff.LOST, []):
        lost.setdefault(reached.how, []).append((label, reached))
    said += [f"data lost on the way: {said_of(how, group)}" for how, group in lost.items()]
    said += [f"{label}: {a.how}" for label, a in found.get(bodydiff.UNREAD, [])]
    if said:
        return failed(". ".join(said) + sent_round.also_unserved(h) + ". Echo every chunk's bytes unchanged.",
                      evidence)
    sent_round.witnessed(h)
    if not bodies:
        return failed("the EPP refused every body size, the backend received none", evidence)
    return passed(f"{len(bodies)} bodies arrived byte for byte", evidence)


TRAILER = {"x-eppkit-trailer": "1"}


@check("trailers", "request trailers are answered", category=PROTOCOL, source=ENVOY_EXT_PROC, needs=SERVED)
def trailers(h: EppHarness) -> Result:
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
       needs=SERVED + ("bodies-byte-for-byte", "trailers"))
def trailers_body_once(h: EppHarness) -> Result:
    """An HTTP/2 body followed by trailers, through a route with a retry policy (the kit's picked route, as a
    gateway's usually has): the backend receives it once, byte for byte. Envoy 1.36-1.40 keeps a copy of a
    streamed-back body for retries and sends it again when the EPP's trailers reply resumes the request
    (envoyproxy/envoy#45470): an EPP that streams the body back and then answers the trailers gets it to the
    backend twice. One that replies to the body's end with CONTINUE_AND_REPLACE and the whole body does not."""
    if h.protocol != H2C:
        return not_applicable("Envoy drops HTTP/1.1 request trailers before any filter (no enable_trailers)")
    bed = h.bed()
    data = body(200, bed.backends[0].model)
    result = h.chat(bed, raw_body=data, trailers=TRAILER)
    sent = Sent(result, h.hop(bed, result), h.protocol)
    got = h.body_digest(result)
    evidence = [evidence_of(sent.hop), f"client: HTTP {result.status}: {str(result.body)[:200]}"]
    if got is None and sent.served_by is None:
        h.must_serve(sent, "a request with trailers")
    if got != h.digest(data):
        version = h.envoy_binary.version if h.envoy_binary is not None else "this Envoy"
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
       source=ENVOY_EXT_PROC, needs=SERVED)
def cancelled_request(h: EppHarness) -> Result:
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
       needs=("serves",), uses=(ONE_RUN,))
def health_services(h: EppHarness) -> Result:
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
       level=SHOULD, source=ENVOY_EXT_PROC, needs=SERVED)
def concurrent_streams(h: EppHarness) -> Result:
    """{CONCURRENT!W} requests at once, each its own ext_proc stream: every one served, no stream failed or reset by
    the EPP (``streams_failed``, ``spurious_msgs_received``)."""
    bed = h.bed()
    before = h.stats(bed)
    results = h.concurrently(bed, CONCURRENT, lambda: h.chat(bed))  # in this run's protocol (h2c: one connection)
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
