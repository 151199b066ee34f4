"""The data plane of the EPP protocol: the gateway follows the EPP's pick (fallbacks included) and reports the
endpoint that served; the EPP honours the subset hint, answers 503 when no endpoint fits and 429 when it
sheds; GAIE's conformance mechanisms (the test header, fail-open, several target ports per pod).

GAIE's own conformance suite judges the gateway with its EPP as the fixed point; here the kit's Envoy is the
fixed point and the EPP is judged (its picks as Envoy logged them, and which pod answered).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING

import requests

from eppkit.conformance.contract import answered_by_the_epp, down, error_body_problem, judge_fail_closed
from eppkit.conformance.pods import with_pod_args
from eppkit.conformance.registry import ONE_RUN, SERVED, check, declared_by
from eppkit.conformance.results import (
    DATA_PLANE,
    GAIE_CONFORMANCE,
    SHOULD,
    evidence_of,
    failed,
    judged,
    not_applicable,
    passed,
)
from eppkit.conformance.target import Target
from eppkit.conformance.witness import NotWitnessed, Sent, call_failures, from_the_epp, served
from eppkit.core.polling import PollTimeout, poll
from eppkit.modes import external_epp
from eppkit.services.picker import headers

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness
    from eppkit.conformance.results import Result

READY_S = 5.0  # how long a fresh testbed's EPP may take to serve its first pick
PICKS = 6  # follows-pick's requests


def _first(destination: str | None) -> str:
    return (destination or "").split(",")[0].strip()


@check("follows-pick", "the gateway sends each request where the EPP picked", category=DATA_PLANE, needs=SERVED)
def follows_pick(h: EppHarness) -> Result:
    """{PICKS!W} requests: the EPP names a destination (``envoy.lb`` metadata) and Envoy's upstream is its primary."""
    bed = h.bed()
    evidence, problems = [], []
    for sent in h.send_all(bed, [{}] * PICKS):
        hop = h.must_serve(sent, "a request").hop
        evidence.append(evidence_of(hop))
        if not hop["destination"]:
            problems.append(f"no destination from the EPP (route {hop['route']})")
        elif hop["upstream"] != _first(hop["destination"]):
            problems.append(f"picked {_first(hop['destination'])}, served by {hop['upstream']}")
    return judged(problems, evidence, failing="requests did not go where the EPP picked",
                  passing="every request went to the EPP's primary")


@check("served-endpoint", "the endpoint that served is reported", category=DATA_PLANE, needs=SERVED)
def served_endpoint(h: EppHarness) -> Result:
    """The endpoint that served comes back in ``envoy.lb`` / ``x-gateway-destination-endpoint-served`` (the
    EPP sees it on the response path) and in the response header of that name."""
    bed = h.bed()
    evidence, problems = [], []
    for sent in h.send_all(bed, [{}] * 3):
        sent = h.must_serve(sent, "a request")
        result, hop = sent.result, sent.hop
        evidence.append(evidence_of(hop) + f"; response header {headers.SERVED}: {result.headers.get(headers.SERVED)}")
        if (result.headers.get(headers.SERVED) != hop["upstream"]
                or (hop["served"] and hop["served"] != hop["upstream"])):
            problems.append(f"served by {hop['upstream']}, reported {result.headers.get(headers.SERVED)!r} / "
                            f"{hop['served']!r}")
    return judged(problems, evidence, failing="the served endpoint was not reported",
                  passing="reported for every request")


@check("test-header", "GAIE's test header (test-epp-endpoint-selection) forces the pick", category=DATA_PLANE,
       level=SHOULD, source=GAIE_CONFORMANCE, needs=SERVED)
def test_header(h: EppHarness) -> Result:
    """``test-epp-endpoint-selection: <ip:port>`` names the pod; each of three pods named in turn answers (what
    GAIE's conformance tests steer their EPP with)."""
    bed = h.forced_bed()
    evidence, problems = [], []
    pods = list(reversed(h.target.pods))
    asked = h.send_all(bed, [{"headers": {headers.TEST_ENDPOINT_SELECTION: h.address(bed, pod)}} for pod in pods])
    for pod, sent in zip(pods, asked):
        sent = h.must_serve(sent, "a request with the test header")
        evidence.append(f"{headers.TEST_ENDPOINT_SELECTION}: {h.address(bed, pod)} ({pod}) -> HTTP "
                        f"{sent.result.status} from {sent.served_by}")
        if sent.served_by != pod:
            problems.append(f"{pod}: served by {sent.served_by}")
    return judged(problems, evidence, failing="the EPP did not follow the test header",
                  passing="each named pod answered")


@check("several-ports", "a pod's ports are picked exactly (data parallelism)", category=DATA_PLANE, level=SHOULD,
       source=GAIE_CONFORMANCE, needs=SERVED + ("test-header",))
def several_ports(h: EppHarness) -> Result:
    """Pods that share an address on several ports (vLLM's data-parallel ranks): ``ip:port`` in the test header
    names exactly that rank."""
    bed = h.forced_bed()
    hosts = {ep.host for ep in bed.backends}
    if len(hosts) == len(bed.backends):
        return not_applicable("every pod of this testbed has its own address and one port (an InferencePool with "
                              "one target port)")
    evidence, problems = [], []
    asked = h.send_all(bed, [{"headers": {headers.TEST_ENDPOINT_SELECTION: h.address(bed, pod)}}
                             for pod in h.target.pods])
    for pod, sent in zip(h.target.pods, asked):
        sent = h.must_serve(sent, "a request with the test header")
        evidence.append(f"{h.address(bed, pod)} -> {sent.served_by} (HTTP {sent.result.status})")
        if sent.served_by != pod:
            problems.append(f"{h.address(bed, pod)} was served by {sent.served_by}")
    return judged(problems, evidence, failing="a rank of a shared address was not picked exactly",
                  passing="each rank picked exactly")


@check("fallbacks", "a pick whose primary is down is served by its fallback", category=DATA_PLANE, needs=SERVED,
       uses=(ONE_RUN,))
def fallbacks(h: EppHarness) -> Result:
    """With the first pod stopped, requests whose pick (Envoy's record of the ``envoy.lb`` destination) names it
    first and another pod after it are served by that fallback: Envoy tries the list in order (the protocol: "go
    sequentially down the list"). Every request asks for ``<down>,<up>`` with GAIE's test header, so an EPP that
    honours it is judged on every one; another is judged on the picks it makes itself."""
    bed = h.forced_bed("fallbacks")
    down, up = h.target.pods[0], h.target.pods[-1]
    # The EPP picks before the pod goes down: a testbed just started may have an EPP that serves no pick yet (GAIE's
    # answers 503 "no candidates" until it has scraped the pods: CI run F), and then nothing would be witnessed.
    try:
        poll(lambda: h.send(bed).result.status, until=lambda status: status == 200, timeout_s=READY_S, interval_s=0.2)
    except PollTimeout:
        pass  # judged below all the same: without picks, no witness
    bed.services[down].process.kill()
    down_address = h.address(bed, down)
    value = f"{down_address},{h.address(bed, up)}"
    evidence, problems, judged = [], [], 0
    # Three at once, at once after the kill: an EPP that scrapes its pods (GAIE's) soon stops picking the one that
    # is down, and then no request is a witness; three, because Envoy allows three retries at once a cluster.
    for sent in h.send_all(bed, [{"headers": {headers.TEST_ENDPOINT_SELECTION: value}}] * 3):
        hop = sent.hop
        picked = [a.strip() for a in str((hop["destination"] if hop else "") or "").split(",") if a.strip()]
        evidence.append(evidence_of(hop))
        if len(picked) < 2 or picked[0] != down_address:
            continue  # not a pick whose primary is down, with a fallback: no evidence either way
        judged += 1
        fallbacks = {h.pod_of(bed, a) for a in picked[1:]}
        if sent.result.status != 200 or h.pod_of(bed, hop["upstream"] or "") not in fallbacks:
            problems.append(f"{','.join(picked)} ({down} down): {h.cause(sent)}, served by {sent.served_by}")
    if problems:
        return failed(f"requests whose primary ({down}) was down were not served by their fallback: "
                      + "; ".join(problems) + ". Name the fallbacks after the primary, comma-separated, in the "
                      "header and the metadata.", evidence)
    if not judged:
        raise NotWitnessed(f"no pick named the stopped {down} first with a fallback after it (the EPP follows neither "
                           f"GAIE's test header nor picked it itself)", Sent(sent.result, sent.hop, h.protocol))
    return passed(f"{judged} picks with {down} down first were served by their fallback", evidence)


@check("subset-list", "the subset hint as a list narrows the pick", category=DATA_PLANE, needs=SERVED)
def subset_list(h: EppHarness) -> Result:
    """Every request carries ``envoy.lb.subset_hint`` / ``x-gateway-destination-endpoint-subset: ["<pod 1>"]``:
    the EPP picks only from it."""
    return _subset(h, "subset-list", [h.target.pods[1]])


@check("subset-string", "the subset hint as a string narrows the pick", category=DATA_PLANE, level=SHOULD,
       source="GAIE lwepp (a comma-separated string; the protocol doc says a list)", needs=SERVED)
def subset_string(h: EppHarness) -> Result:
    """The same hint as one comma-separated string (GAIE's lightweight EPP accepts it; gateways send it so)."""
    return _subset(h, "subset-string", h.target.pods[2])


def _subset(h: EppHarness, variant: str, hint):
    bed = h.bed(variant, epp_subset_hint=hint)
    wanted = hint if isinstance(hint, list) else hint.split(",")
    received = [h.address(bed, pod) for pod in wanted]  # as the EPP receives it: ip:port
    shown = received if isinstance(hint, list) else ",".join(received)
    evidence, served = [], []
    for sent in h.send_all(bed, [{}] * 4):
        sent = h.must_serve(sent, "a request with a subset hint")
        evidence.append(evidence_of(sent.hop))
        served.append((sent.result.status, sent.served_by))
    evidence.insert(0, f"the subset hint the EPP received: {shown!r} ({', '.join(wanted)})")
    if any(pod not in wanted for _, pod in served):
        return failed(f"subset hint {shown!r} ({', '.join(wanted)}): answered {served}; pick only among the hint's "
                      "endpoints", evidence)
    return passed(f"every request served within {shown!r}", evidence)


def _immediate(h: EppHarness, sent: Sent, status: int, what: str, evidence: list[str]):
    """The EPP's own local reply of ``status`` (Envoy's record: an immediate response from ext_proc): None when it
    was; a failure when the request was answered otherwise; not run when the EPP's stream failed for another
    cause."""
    hop = sent.hop
    immediate = hop is not None and from_the_epp(hop)
    if sent.result.status == status and immediate:
        return None
    if hop is not None and (call_failures(hop) or str(hop["details"] or "").startswith(("ext_proc_error",
                                                                                            "downstream_"))):
        raise NotWitnessed(f"{what} ({sent.protocol}) was not answered by the EPP", sent, h.request_timeout_s)
    if hop is None and not sent.result.status:  # it never reached Envoy (a refused connection): no evidence
        raise NotWitnessed(f"{what} ({sent.protocol}) never reached Envoy", sent, h.request_timeout_s)
    how = f"HTTP {sent.result.status}" + (" from the EPP" if immediate else
                                          f" (routed to {hop['upstream'] if hop else '?'}: {h.cause(sent)})")
    return failed(f"{what}: {how}; answer an ImmediateResponse {status}.", evidence)


@check("no-endpoint-503", "no endpoint fits: 503 with an OpenAI-style error", category=DATA_PLANE, needs=SERVED)
def no_endpoint(h: EppHarness) -> Result:
    """A subset hint that leaves no endpoint eligible gets the EPP's own 503 (its local reply, as Envoy's record
    shows; a 503 from Envoy itself, no healthy upstream, is not one) with an OpenAI-style JSON error
    (``{{"error": {{"message": ...}}}}``, what OpenAI clients read): a hint naming no endpoint of the pool, and a hint
    naming only a pod that is down (its mock stopped; in a control plane its Pod not Ready too), judged once the EPP
    has had {READY_S:g} s to notice."""
    bed = h.bed("no-endpoint", epp_subset_hint=["10.255.255.1:1"])
    sent = h.send(bed)
    evidence = [f"empty subset (10.255.255.1:1, no pod of the pool): {evidence_of(sent.hop)}; client: HTTP "
                f"{sent.result.status}"]
    problem = _no_endpoint_answer(h, sent, "a subset hint naming no pod of the pool", evidence)
    pod = h.target.pods[0]
    bed = h.bed("ineligible-subset", epp_subset_hint=[pod])
    down(bed, pod)
    sent = answered_by_the_epp(lambda: h.send(bed), READY_S)
    evidence.append(f"ineligible subset ({h.address(bed, pod)}: {pod}, down): {evidence_of(sent.hop)}; client: "
                    f"HTTP {sent.result.status}, {json.dumps(sent.result.body)[:300]}")
    problem = problem or _no_endpoint_answer(h, sent, f"a subset hint naming only {pod}, which is down", evidence)
    return problem or passed("503 from the EPP with an OpenAI-style error, for an empty and an ineligible subset",
                             evidence)


def _no_endpoint_answer(h: EppHarness, sent: Sent, what: str, evidence: list[str]):
    """The EPP's 503 to ``what``: None when it was its own with an OpenAI-style error, else the failure (not run
    when its stream failed for another cause)."""
    wrong = _immediate(h, sent, 503, what, evidence)
    if wrong is not None:
        return wrong
    body = error_body_problem(sent.result.body)
    if body:
        evidence.append(f"the body the client got: {json.dumps(sent.result.body)[:300]}")
        return failed(f"{what}: the EPP's 503, but {body}. Answer an ImmediateResponse 503 with content-type "
                      'application/json and an OpenAI-style error body ({"error": {"message": ...}}).', evidence)
    return None


@check("shed-429", "a request the EPP sheds: 429", category=DATA_PLANE, needs=SERVED)
def shed(h: EppHarness) -> Result:
    """A request the EPP drops (the target's ``--shed-header``, e.g. the kit's ``x-eppkit-shed: 1``) is answered
    429 by the EPP itself."""
    if not h.target.shed_header:
        return not_applicable("no way to make this EPP shed on demand (give --shed-header 'name: value')")
    sent = h.send(h.bed(), headers=h.target.shed())
    evidence = [f"request header {h.target.shed_header}", evidence_of(sent.hop), f"client: HTTP {sent.result.status}"]
    return _immediate(h, sent, 429, "a shed request", evidence) or passed("429 from the EPP", evidence)


def _without_epp(h: EppHarness, variant: str, failure_mode_allow: bool):
    """A testbed of the target's mode of integration whose EPP never answers (an address nobody listens on), with
    ``failure_mode_allow`` as asked, once Envoy's health check has marked it down; and 4 requests through it."""
    gone = Target(mode=external_epp.MODE.name, options={"epp_address": "127.0.0.1:1",
                                                        "failure_mode_allow": failure_mode_allow},
                  envoy_version=h.target.envoy_version)
    bed = h.bed(variant, topology=gone.topology())
    h.wait_epp_unhealthy(bed)
    return h.send_all(bed, [{}] * 4)


@check("fail-open", "with the EPP unavailable and fail-open, requests are still served", category=DATA_PLANE,
       level=SHOULD, source=GAIE_CONFORMANCE)
def fail_open(h: EppHarness) -> Result:
    """The gateway's side of the protocol: with ``failure_mode_allow`` and no EPP answering, requests go round
    robin over the pool (GAIE's EppUnAvailableFailOpen), whoever the EPP would have been."""
    sents = _without_epp(h, "fail-open", True)
    evidence = [evidence_of(s.hop) for s in sents]
    problems = [h.cause(s) for s in sents if not served(s)]
    return judged(problems, evidence, failing="with the EPP unreachable and failure_mode_allow, requests failed",
                  passing="served round robin without the EPP")


@check("fail-closed", "with the EPP unavailable and fail-closed, the gateway answers 5xx and reaches no pod",
       category=DATA_PLANE, level=SHOULD, uses=(ONE_RUN,),
       source="Envoy ext_proc failure_mode_allow: false (its default); GAIE's EppUnAvailableFailOpen is its twin")
def fail_closed(h: EppHarness) -> Result:
    """The gateway's side, judged for the integration the EPP runs behind (the kit's Envoy, ext_proc as the target's
    mode sets it up), never the EPP itself: with ``failure_mode_allow: false`` and no EPP answering, every request is
    answered 5xx by Envoy and none reaches a pod (Envoy's record: no upstream; no pod's answer)."""
    return judge_fail_closed(_without_epp(h, "fail-closed", False))


KV_EVENTS = "vLLM's KV-cache events, as llm-d's precise prefix-cache scorer and Dynamo's KV router read them"
CONVERSATIONS, TURNS = 4, 4  # four conversations on three pods: a picker blind to the blocks cannot line them up
EVENTS_S = 0.3  # after each round of turns: the pods' KV events reach the EPP
PREFIX_WORDS = 100  # a conversation's own prefix: 100 tokens, six full blocks of 16
KV_CACHE_BLOCKS = 64  # each pod's capacity: the conversations fit, FILL_PROMPTS evict them
FILL_PROMPTS, FILL_WORDS = 10, 150  # sent straight to a pod: 90 blocks of other prompts, least recently used out


def _prefix(c: int, words: int = PREFIX_WORDS) -> str:
    """The first ``words`` words of conversation ``c``'s prefix."""
    vocab = ("pool", "route", "block", "token", "cache", "prefill", "decode", "envoy", "picker", "gateway")
    return " ".join(f"{vocab[(c * 3 + i) % len(vocab)]}{c}x{i}" for i in range(words))


def _conversation(c: int, turn: int) -> str:
    """Conversation ``c``'s prompt at ``turn``: a prefix of its own (~100 tokens: several KV blocks of 16), then
    its turn's question."""
    return f"{_prefix(c)} Turn {turn}: which pod answers?"


CACHE_AWARE = declared_by(lambda target: target.cache_aware, "the EPP does not say it is cache-aware (--cache-aware): "
                          "where it sends a prompt is not judged by where its blocks are")


def _cached(sent: Sent) -> tuple[int, object]:
    """The pod's own count of the prompt tokens it found cached, and the prompt's size (the answer's usage)."""
    usage = (sent.result.body or {}).get("usage") or {}
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0, usage.get("prompt_tokens")


def _to_pod(h: EppHarness, bed, address: str, path: str, body: dict | None = None) -> None:
    """A request straight to a pod, past Envoy and the EPP (what another client of the pod does)."""
    if body is not None:
        body = {"model": bed.backends[0].model, "max_tokens": 1, **body}
    answer = requests.post(f"http://{address}{path}", json=body, timeout=h.request_timeout_s)
    answer.raise_for_status()


@check("kv-cache-affinity", "a cache-aware EPP sends prompts that share a prefix to a pod that holds its blocks, "
       "after an eviction and a cache reset too",
       category=DATA_PLANE, level=SHOULD, source=KV_EVENTS, needs=SERVED, uses=(ONE_RUN,), declared=CACHE_AWARE)
def kv_cache_affinity(h: EppHarness) -> Result:
    """For an EPP that says it is cache-aware \\
    (``--cache-aware``): {CONVERSATIONS!w} conversations, each a prompt prefix of its
    own and {TURNS!w} turns, sent one at a time and interleaved to pods that publish their KV-cache events (vLLM's
    ZeroMQ events; the EPP learns where from ``{{kv_events}}``). Every turn after a conversation's first must go to a
    pod that already held its prefix, in that pod's own words: the answer's ``usage.prompt_tokens_details.
    cached_tokens`` (the blocks it found in its prefix cache).

    Then what the pods say changes under the EPP, as it does when a pod restarts or fills up. **A cache reset**
    (``POST /reset_prefix_cache`` to a pod holding conversation 0: AllBlocksCleared, what a restarted pod announces),
    and another pod given the first half of the prefix straight (its BlockStored): the next turn must go to that pod,
    the only one holding any of it; an EPP that missed the reset still sees the whole prefix on the first. **An
    eviction**: the pod that served that turn fills with other \\
    prompts sent straight to it (each pod keeps {KV_CACHE_BLOCKS} blocks;
    BlockRemoved, least recently used first), a third pod is given the prefix's first block: the next turn must go
    there. A pod answering with the prefix still cached where it should not be (the reset or the eviction did not
    take) makes the check not run, never pass."""
    pods = with_pod_args(h.target.topology(), "--kv-cache-size", str(KV_CACHE_BLOCKS))
    bed = h.bed("kv-events", topology=dataclasses.replace(pods, kv_events=True))
    names = {ep.address: ep.name for ep in bed.backends}
    if len(bed.backends) < 3:
        return not_applicable("the check needs three pods: the target's topology has fewer")
    holders: dict[int, set[str]] = {c: set() for c in range(CONVERSATIONS)}
    evidence, problems = [], []

    def turn_of(c: int, turn: int, what: str) -> tuple[Sent, str, int]:
        sent = h.must_serve(h.send(bed, prompt=_conversation(c, turn)), what)
        cached, prompt = _cached(sent)
        pod = sent.hop["upstream"]
        evidence.append(f"{what}: {names.get(pod, pod)} served it with {cached} of its {prompt} prompt tokens cached; "
                        + evidence_of(sent.hop))
        return sent, pod, cached

    for turn in range(TURNS):
        for c in range(CONVERSATIONS):
            _, pod, cached = turn_of(c, turn, f"conversation {c}, turn {turn}")
            if turn and not cached:
                problems.append(f"conversation {c}'s turn {turn} went to {names.get(pod, pod)}, which held none of "
                                f"its prefix (held by {', '.join(sorted(names.get(p, p) for p in holders[c]))})")
            holders[c].add(pod)
        time.sleep(EVENTS_S)
    later = CONVERSATIONS * (TURNS - 1)
    fix = ("score the pods by the blocks their KV-cache events say they hold ({kv_events}: where each pod publishes "
           "them), and drop what a pod's AllBlocksCleared and BlockRemoved take away")
    if problems:
        return judged(problems, evidence, failing="prompts that share a prefix went to pods that did not hold it",
                      passing="", fix=fix)

    # A cache reset: every block of one holder of conversation 0 out; half its prefix on another pod.
    cleared = sorted(holders[0])[0]
    given = next(ep.address for ep in bed.backends if ep.address not in holders[0])
    _to_pod(h, bed, cleared, "/reset_prefix_cache")
    _to_pod(h, bed, given, "/v1/chat/completions", {"messages": [{"role": "user", "content": _prefix(0, 50)}]})
    evidence.append(f"{names[cleared]}'s prefix cache reset (POST /reset_prefix_cache: AllBlocksCleared); sent "
                    f"straight to {names[given]}: the first 50 words of conversation 0's prefix")
    time.sleep(EVENTS_S)
    sent, pod, cached = turn_of(0, TURNS, f"conversation 0, turn {TURNS}, after the reset")
    if pod == cleared and cached:
        raise NotWitnessed(f"{names[cleared]} still held conversation 0's prefix after its reset", sent)
    if pod != given or not cached:
        problems.append(f"after {names[cleared]} reset its prefix cache (AllBlocksCleared), conversation 0's next "
                        f"turn went to {names.get(pod, pod)}, which held {cached} of its tokens; {names[given]} held "
                        "the first half of its prefix")
        return judged(problems, evidence, failing="prompts went to pods that no longer held their prefix", passing="",
                      fix=fix)
    # An eviction: the pod that served it fills with other prompts; the prefix's first block on another pod.
    full = pod
    third = next(ep.address for ep in bed.backends if ep.address not in (full, cleared))
    for i in range(FILL_PROMPTS):
        _to_pod(h, bed, full, "/v1/chat/completions",
                {"messages": [{"role": "user", "content": _prefix(CONVERSATIONS + i, FILL_WORDS)}]})
    _to_pod(h, bed, third, "/v1/chat/completions", {"messages": [{"role": "user", "content": _prefix(0, 20)}]})
    evidence.append(f"sent straight to {names.get(full, full)}: {FILL_PROMPTS} other prompts of {FILL_WORDS} words "
                    f"(its {KV_CACHE_BLOCKS} blocks overflow: BlockRemoved); to {names[third]}: the first 20 words of "
                    "conversation 0's prefix")
    time.sleep(EVENTS_S)
    sent, pod, cached = turn_of(0, TURNS + 1, f"conversation 0, turn {TURNS + 1}, after the eviction")
    if pod == full and cached:
        raise NotWitnessed(f"{names.get(full, full)} still held conversation 0's prefix after {FILL_PROMPTS} other "
                           "prompts", sent)
    if pod != third or not cached:
        problems.append(f"after {names.get(full, full)} evicted conversation 0's blocks (BlockRemoved), its next turn "
                        f"went to {names.get(pod, pod)}, which held {cached} of its tokens; {names[third]} held the "
                        "first block of its prefix")
    return judged(problems, evidence, failing="prompts went to pods that no longer held their prefix",
                  passing=f"all {later} later turns went to a pod holding their prefix, and so did the turns after a "
                          "cache reset and an eviction",
                  fix=fix)
