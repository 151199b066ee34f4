"""The data plane of the EPP protocol: the gateway follows the EPP's pick (fallbacks included) and reports the
endpoint that served; the EPP honours the subset hint, answers 503 when no endpoint fits and 429 when it
sheds; GAIE's conformance mechanisms (the test header, fail-open, several target ports per pod).

GAIE's own conformance suite judges the gateway with its EPP as the fixed point; here the kit's Envoy is the
fixed point and the EPP is judged (its picks as Envoy logged them, and which pod answered).
"""

from __future__ import annotations

from eppkit.conformance.checks.registry import (
    DATA_PLANE,
    GAIE_CONFORMANCE,
    SHOULD,
    check,
    evidence_of,
    failed,
    not_applicable,
    passed,
)
from eppkit.conformance.target import Target
from eppkit.modes import external_epp
from eppkit.services.picker import headers

# A request is served only when these hold (a body re-encoded on the way is still served: its own check).
NEEDS = ("reply-order", "streamed-body-mutations", "end-of-stream")


def _first(destination: str | None) -> str:
    return (destination or "").split(",")[0].strip()


@check("follows-pick", "the gateway sends each request where the EPP picked", category=DATA_PLANE, needs=NEEDS)
def follows_pick(h):
    """Six requests: the EPP names a destination (``envoy.lb`` metadata) and Envoy's upstream is its primary."""
    bed = h.bed()
    evidence, problems = [], []
    for _ in range(6):
        result = h.chat(bed)
        hop = h.hop(bed, result)
        evidence.append(evidence_of(hop))
        if hop is None or result.status != 200:
            problems.append(f"HTTP {result.status}")
        elif not hop["destination"]:
            problems.append(f"no destination from the EPP (route {hop['route']})")
        elif hop["upstream"] != _first(hop["destination"]):
            problems.append(f"picked {_first(hop['destination'])}, served by {hop['upstream']}")
    if problems:
        return failed("requests did not go where the EPP picked: " + "; ".join(problems), evidence)
    return passed("every request went to the EPP's primary", evidence)


@check("served-endpoint", "the endpoint that served is reported", category=DATA_PLANE, needs=NEEDS)
def served_endpoint(h):
    """The endpoint that served comes back in ``envoy.lb`` / ``x-gateway-destination-endpoint-served`` (the
    EPP sees it on the response path) and in the response header of that name."""
    bed = h.bed()
    evidence, problems = [], []
    for _ in range(3):
        result = h.chat(bed)
        hop = h.hop(bed, result)
        evidence.append(evidence_of(hop) + f"; response header {headers.SERVED}: {result.headers.get(headers.SERVED)}")
        if hop is None or result.status != 200:
            problems.append(f"HTTP {result.status}")
            continue
        if result.headers.get(headers.SERVED) != hop["upstream"] or (hop["served"] and hop["served"] != hop["upstream"]):
            problems.append(f"served by {hop['upstream']}, reported {result.headers.get(headers.SERVED)!r} / "
                            f"{hop['served']!r}")
    if problems:
        return failed("the served endpoint was not reported: " + "; ".join(problems), evidence)
    return passed("reported for every request", evidence)


@check("test-header", "GAIE's test header (test-epp-endpoint-selection) forces the pick", category=DATA_PLANE,
       level=SHOULD, source=GAIE_CONFORMANCE, needs=NEEDS)
def test_header(h):
    """``test-epp-endpoint-selection: <ip:port>`` names the pod; each of three pods named in turn answers (what
    GAIE's conformance tests steer their EPP with)."""
    bed = h.forced_bed()
    evidence, problems = [], []
    for pod in reversed(h.target.pods):
        result = h.chat(bed, headers={headers.TEST_ENDPOINT_SELECTION: h.address(bed, pod)})
        evidence.append(f"{headers.TEST_ENDPOINT_SELECTION}: {h.address(bed, pod)} ({pod}) -> HTTP {result.status} "
                        f"from {h.served_by(result)}")
        if result.status != 200 or h.served_by(result) != pod:
            problems.append(f"{pod}: HTTP {result.status} from {h.served_by(result)}")
    if problems:
        return failed("the EPP did not follow the test header: " + "; ".join(problems), evidence)
    return passed("each named pod answered", evidence)


@check("several-ports", "a pod's ports are picked exactly (data parallelism)", category=DATA_PLANE, level=SHOULD,
       source=GAIE_CONFORMANCE, needs=NEEDS + ("test-header",))
def several_ports(h):
    """Pods that share an address on several ports (vLLM's data-parallel ranks): ``ip:port`` in the test header
    names exactly that rank."""
    bed = h.forced_bed()
    hosts = {ep.host for ep in bed.backends}
    if len(hosts) == len(bed.backends):
        return not_applicable("every pod of this testbed has its own address and one port (an InferencePool with "
                              "one target port)")
    evidence, problems = [], []
    for pod in h.target.pods:
        result = h.chat(bed, headers={headers.TEST_ENDPOINT_SELECTION: h.address(bed, pod)})
        evidence.append(f"{h.address(bed, pod)} -> {h.served_by(result)} (HTTP {result.status})")
        if h.served_by(result) != pod:
            problems.append(f"{h.address(bed, pod)} was served by {h.served_by(result)}")
    if problems:
        return failed("a rank of a shared address was not picked exactly: " + "; ".join(problems), evidence)
    return passed("each rank picked exactly", evidence)


@check("fallbacks", "a pick whose primary is down is served by its fallback", category=DATA_PLANE,
       needs=NEEDS + ("test-header",))
def fallbacks(h):
    """With the first pod stopped, ``test-epp-endpoint-selection: <down>,<up>`` gives the list primary, fallback;
    Envoy tries them in order and the fallback answers (the protocol: "go sequentially down the list")."""
    bed = h.forced_bed("fallbacks")
    down, up = h.target.pods[0], h.target.pods[-1]
    bed.services[down].process.kill()
    value = f"{h.address(bed, down)},{h.address(bed, up)}"
    evidence, served = [], []
    for _ in range(4):
        result = h.chat(bed, headers={headers.TEST_ENDPOINT_SELECTION: value})
        hop = h.hop(bed, result)
        evidence.append(evidence_of(hop))
        served.append((result.status, h.served_by(result)))
    if served != [(200, up)] * 4:
        return failed(f"with {down} down, the requests for {down},{up} were answered {served}: name the fallbacks "
                      "after the primary, comma-separated, in the header and the metadata.", evidence)
    return passed(f"{up} answered every request ({down} down)", evidence)


@check("subset-list", "the subset hint as a list narrows the pick", category=DATA_PLANE, needs=NEEDS)
def subset_list(h):
    """Every request carries ``envoy.lb.subset_hint`` / ``x-gateway-destination-endpoint-subset: ["<pod 1>"]``:
    the EPP picks only from it."""
    return _subset(h, "subset-list", [h.target.pods[1]])


@check("subset-string", "the subset hint as a string narrows the pick", category=DATA_PLANE, level=SHOULD,
       source="GAIE lwepp (a comma-separated string; the protocol doc says a list)", needs=NEEDS)
def subset_string(h):
    """The same hint as one comma-separated string (GAIE's lightweight EPP accepts it; gateways send it so)."""
    return _subset(h, "subset-string", h.target.pods[2])


def _subset(h, variant: str, hint):
    bed = h.bed(variant, epp_subset_hint=hint)
    wanted = hint if isinstance(hint, list) else hint.split(",")
    evidence, served = [], []
    for _ in range(4):
        result = h.chat(bed)
        evidence.append(evidence_of(h.hop(bed, result)))
        served.append((result.status, h.served_by(result)))
    if any(status != 200 or pod not in wanted for status, pod in served):
        return failed(f"subset hint {hint!r}: answered {served}; pick only among the hint's endpoints", evidence)
    return passed(f"every request served within {hint!r}", evidence)


@check("no-endpoint-503", "no endpoint fits: 503", category=DATA_PLANE, needs=NEEDS)
def no_endpoint(h):
    """A subset hint naming no endpoint of the pool leaves none eligible: the EPP answers an immediate 503."""
    bed = h.bed("no-endpoint", epp_subset_hint=["10.255.255.1:1"])
    result = h.chat(bed)
    hop = h.hop(bed, result)
    evidence = [evidence_of(hop), f"client: HTTP {result.status}"]
    if result.status != 503:
        return failed(f"with no eligible endpoint the EPP answered {result.status} (routed to "
                      f"{hop['upstream'] if hop else '?'}): answer an ImmediateResponse 503.", evidence)
    return passed("503", evidence)


@check("shed-429", "a request the EPP sheds: 429", category=DATA_PLANE, needs=NEEDS)
def shed(h):
    """A request the EPP drops (the target's ``--shed-header``, e.g. the kit's ``x-eppkit-shed: 1``) is answered
    429 by the EPP itself."""
    if not h.target.shed_header:
        return not_applicable("no way to make this EPP shed on demand (give --shed-header 'name: value')")
    bed = h.bed()
    result = h.chat(bed, headers=h.target.shed())
    hop = h.hop(bed, result)
    evidence = [f"request header {h.target.shed_header}", evidence_of(hop), f"client: HTTP {result.status}"]
    if result.status != 429:
        return failed(f"a shed request got {result.status}: answer an ImmediateResponse 429.", evidence)
    return passed("429", evidence)


@check("fail-open", "with the EPP unavailable and fail-open, requests are still served", category=DATA_PLANE,
       level=SHOULD, source=GAIE_CONFORMANCE)
def fail_open(h):
    """The gateway's side of the protocol: with ``failure_mode_allow`` and no EPP answering, requests go round
    robin over the pool (GAIE's EppUnAvailableFailOpen), whoever the EPP would have been."""
    gone = Target(mode=external_epp.MODE.name, options={"epp_address": "127.0.0.1:1", "failure_mode_allow": True})
    bed = h.bed("fail-open", topology=gone.topology())
    h.wait_epp_unhealthy(bed)
    results = [h.chat(bed) for _ in range(4)]
    evidence = [evidence_of(h.hop(bed, results[-1]))]
    served = [(r.status, h.served_by(r)) for r in results]
    evidence.append(f"answers: {served}")
    if any(status != 200 for status, _ in served):
        return failed("with the EPP unreachable and failure_mode_allow, requests failed", evidence)
    return passed("served round robin without the EPP", evidence)
