"""The response path through the EPP (response processing on: response headers SEND, body FULL_DUPLEX_STREAMED,
trailers SEND): the response passes whole, the served endpoint reaches the EPP, the decision's metadata holds
to the request's end, and the framing of the response stays Envoy's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.registry import SERVED, check
from eppkit.conformance.results import ENVOY_EXT_PROC, PROTOCOL, SHOULD, evidence_of, failed, judged, passed
from eppkit.conformance.witness import Sent, stream_cut

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness
    from eppkit.conformance.results import Result

RESPONSES = {"epp_process_response": True}  # the testbed variant with response processing on
TOKENS = 8  # response-phases' streamed answer


def responses_bed(h: EppHarness):
    return h.bed("responses", **RESPONSES)


@check("response-phases", "a streamed response passes through the EPP's response phases", category=PROTOCOL,
       source=ENVOY_EXT_PROC, needs=SERVED)
def response_phases(h: EppHarness) -> Result:
    """With response processing on (response headers SEND, body FULL_DUPLEX_STREAMED): a streamed chat request
    gets every token and ``[DONE]``, the response phases' call status is 0, and the served endpoint reaches
    the EPP (``envoy.lb`` metadata; an EPP that echoes it as ``x-conformance-test-served-endpoint``, as GAIE's
    conformance EPP does, is checked against what Envoy served)."""
    bed = responses_bed(h)
    result = h.chat(bed, stream=True, max_tokens=TOKENS)
    hop = h.hop(bed, result)
    cut = stream_cut(result, TOKENS)
    evidence = [evidence_of(hop), f"client: HTTP {result.status}, {cut or f'{TOKENS} tokens and [DONE]'}"
                + (f", error {result.error}" if result.error else "")]
    bad = {k: v for k, v in (hop.call_statuses() if hop else {}).items() if k.startswith("response") and v != 0}
    if hop is not None and not bad and hop["upstream"] in (None, "", "-"):
        h.must_serve(Sent(result, hop, h.protocol), "a streamed request")  # it never reached a backend
    if result.status != 200 or cut or bad or hop is None:
        lost = f"HTTP {result.status}" + (f", {cut}" if cut else "")
        lost += ": data lost on the way" if cut and result.status == 200 else ""
        return failed(f"the streamed response did not come through whole ({lost}"
                      + (f"; response call status {bad}" if bad else "") + "): answer response headers, and echo "
                      "each response body chunk at once with its end_of_stream.", evidence)
    echoed = result.headers.get("x-conformance-test-served-endpoint")
    if echoed is not None:
        evidence.append(f"the EPP echoed the served endpoint {echoed!r}; Envoy served {hop['upstream']!r}")
        if echoed != hop["upstream"]:
            return failed("the served endpoint the EPP saw is not the one Envoy served", evidence)
    return passed("the response streamed through the EPP" + (" and the served endpoint reached it" if echoed else ""),
                  evidence)


def _destinations(h: EppHarness, bed, n: int) -> tuple[list[str], list[str]]:
    """``n`` served requests on ``bed``: Envoy's records, and what differs between the header, the metadata Envoy
    holds at the request's end and the endpoint that served."""
    evidence, problems = [], []
    for sent in h.send_all(bed, [{}] * n):
        hop = h.must_serve(sent, "a request").hop
        evidence.append(evidence_of(hop))
        if not hop["destination"]:
            continue
        if hop["destination"] != hop["destination_header"]:
            problems.append(f"metadata {hop['destination']!r}, header {hop['destination_header']!r}")
    return evidence, problems


@check("same-destination", "the header and the metadata name the same destination", category=PROTOCOL,
       needs=SERVED + ("response-phases",))
def same_destination(h: EppHarness) -> Result:
    """``x-gateway-destination-endpoint`` and ``envoy.lb`` / ``x-gateway-destination-endpoint`` carry the same
    value (the protocol: precedence between them is undefined; Envoy's picked route reads the metadata), with and
    without response processing (the metadata as Envoy holds it when the request ends)."""
    evidence, problems = [], []
    for variant, bed in (("base", h.bed()), ("responses", responses_bed(h))):
        seen, wrong = _destinations(h, bed, 3)
        evidence += seen
        problems += [f"{variant}: {w}" for w in wrong]
    if problems:
        return failed("the EPP named different destinations: " + "; ".join(problems) +
                      ". Set the header and the metadata to the same value.", evidence)
    if not any('"destination"' in e for e in evidence):
        return failed("the EPP named no destination in 6 requests (no envoy.lb metadata)", evidence)
    return passed("header and metadata agree", evidence)


@check("metadata-stable", "the decision's metadata is not overwritten on the response path", category=PROTOCOL,
       source="GAIE EPP protocol; GAIE #2824", needs=SERVED + ("response-phases",))
def metadata_stable(h: EppHarness) -> Result:
    """With response processing on, the ``envoy.lb`` destination Envoy holds when the request ends is the one it
    routed by: the endpoint that served is its primary. An EPP that sends dynamic metadata again on a response
    reply (naming another pod) overwrites the request's (GAIE #2824): access logs, retries and the served-endpoint
    report then name the wrong pod."""
    bed = responses_bed(h)
    evidence, problems = [], []
    for sent in h.send_all(bed, [{}] * 3):
        hop = h.must_serve(sent, "a request").hop
        evidence.append(evidence_of(hop))
        primary = str(hop["destination"] or "").split(",")[0].strip()
        if primary and primary != hop["upstream"]:
            problems.append(f"served by {hop['upstream']}, the metadata at the request's end names "
                            f"{hop['destination']!r}")
    return judged(problems, evidence, failing="the destination metadata changed after the decision",
                  passing="the destination held from the decision to the request's end",
                  fix="Send envoy.lb metadata with the request headers reply only, never on a response reply.")



REJECTED = "http.ingress.ext_proc.rejected_header_mutations"
FRAMED_TOKENS = 2  # framing-headers' streamed answer


@check("framing-headers", "the EPP leaves a response's framing to Envoy", category=PROTOCOL, level=SHOULD,
       source="HTTP semantics (RFC 9110 §6.1, §8.6); GAIE #2993, envoyproxy/ai-gateway #2391",
       needs=SERVED + ("response-phases",))
def framing_headers(h: EppHarness) -> Result:
    """On its response headers reply the EPP sets no ``transfer-encoding`` (nor ``content-length``): how the
    response is framed is the proxy's business, and the EPP sees the response before Envoy re-frames it. An EPP
    that echoes the backend's headers back sets them (GAIE #2993: the response cut after its first events behind
    a gateway that applied them). The kit's Envoy ignores a ``transfer-encoding`` mutation and counts it
    (``rejected_header_mutations``), and in FULL_DUPLEX_STREAMED skips a ``content-length`` one: the bug is
    neutralised here, and reported. A streamed answer cut short on the way (data lost: its tokens that arrived, no
    ``[DONE]``) fails it too, never passes."""
    bed = responses_bed(h)
    before = h.stats(bed)
    sents = [h.must_serve(s, "a request") for s in h.send_all(bed, [{"stream": False},
                                                                     {"stream": True, "max_tokens": FRAMED_TOKENS}])]
    rejected = h.delta(before, h.stats(bed)).get(REJECTED, 0)
    evidence = [evidence_of(s.hop) for s in sents] + [f"Envoy stat {REJECTED}: +{rejected}"]
    cut = stream_cut(sents[1].result, FRAMED_TOKENS)
    if cut:  # served (200), yet cut short: what a gateway that applies such headers does to the stream
        return failed(f"the streamed answer was cut short on the way ({cut}: data lost): leave a response's framing "
                      "to Envoy (no transfer-encoding or content-length on a response headers reply), and echo "
                      "each response body chunk whole, with its end_of_stream.", evidence)
    if rejected:
        version = h.envoy_binary.version if h.envoy_binary is not None else ""
        return failed(f"the EPP set transfer-encoding on its response headers replies: Envoy {version} refused "
                      f"{rejected} such header mutations ({REJECTED}), so these responses came through, but a gateway "
                      "that applies them breaks the response. Set no transfer-encoding or content-length on a "
                      "response headers reply (do not echo the backend's headers back).", evidence)
    return passed("no framing header from the EPP", evidence)
