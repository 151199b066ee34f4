"""Flow control judged black-box: an EPP that says it queues requests while the pool is saturated (``--flow-control``;
llm-d-router's ``flowControl`` feature gate) holds them instead of sending them on or shedding them, sends a higher
priority band first, takes turns between two flows of one band, and drops a request past its TTL with the status it
declares (``--flow-control-ttl``, ``--flow-control-drop-status``). Rules the EPP does not declare are n/a.

Each check has a testbed of its own with one pod running one request at a time (``--max-num-seqs 1``), saturated for
real by 6 long streams sent straight to it (1 running, 5 waiting: GAIE's queue-depth threshold, in the pod's own
``/metrics``). The probes through Envoy then wait; the check frees the pod's slots one at a time, 0.5 s apart (the
stream it runs dropped, the next one of its queue starts), so an EPP lets one request on per slot, and the order
in which it did is the order of Envoy's upstream starts (its access log: the request's start plus
``upstream_start_us``). A pod that would not saturate, or stopped being saturated before the probes were queued,
leaves the check not run, never passed.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eppkit.conformance.checks.saturation import over
from eppkit.conformance.contract import openai_error
from eppkit.conformance.pods import (
    BUSY_WITHIN_S,
    PROBE_GAP_S,
    SCRAPE_S,
    BusyLoad,
    load_words,
    off_network,
    scrape,
    until,
    with_pod_args,
)
from eppkit.conformance.registry import CONTROL_PLANE, ONE_RUN, OWN_TESTBED, SERVED, check, declared_by
from eppkit.conformance.results import DATA_PLANE, NOT_RUN, SHOULD, Result, evidence_of, judged, not_applicable
from eppkit.conformance.target import FLOW_CONTROL_TTL_S, Target  # noqa: F401  (ttl-drop's rule says their defaults)
from eppkit.conformance.witness import Sent, cause, from_the_epp, served
from eppkit import modes
from eppkit.modes import ext_proc
from eppkit.observability import expected_spans as ex
from eppkit.observability.client import PROTOCOLS
from eppkit.observability.contract import GenAi, Service, Vllm
from eppkit.services.picker.flow_control import DROPPED_REASON, FAIRNESS_ID, FAIRNESS_ID_GAIE
from eppkit.services.picker.headers import OBJECTIVE

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

SOURCE = ("llm-d-router v0.10 flow control (its flowControl feature gate: priority bands, fairness within a band, "
          "default-request TTL 60 s, 429 / 503 with x-llm-d-request-dropped-reason); GAIE v1.5.0's flowControl gate")
STREAMS = 6  # long streams straight to the one pod: 1 running (--max-num-seqs 1), 5 waiting: saturated
HOLD_S = 0.5  # after the last probe was sent, before the first slot is freed: every probe is queued by then
FREE_GAP_S = 0.5  # between two freed slots: more than twice the kit's scrape interval (0.2 s), GAIE's (0.05 s)
WAVE_S = 0.15  # requests Envoy sent upstream closer together than this went on at once: their order is not told
MAX_RUN = 2  # fairness: one flow served at most this many times in a row while the other waits
# The objectives priority-bands makes (name, priority) and the flows fairness sends.
HIGH, LOW = ("eppkit-high", 10), ("eppkit-low", 0)
FLOW_A, FLOW_B = "eppkit-tenant-a", "eppkit-tenant-b"
TTL_SLACK_S = 2.0  # ttl-drop: the pod kept saturated this long past the declared TTL
DROP_EARLY = 0.8  # ttl-drop: an answer before this share of the TTL is no TTL drop (a shed, a refusal)

DECLARED = declared_by(lambda target: target.flow_control, "the EPP does not say it queues requests while the pool "
                       "is saturated (--flow-control): its queue is not judged")
QUEUED = "queued-then-served"


def options_for(target) -> dict:
    """An EPP whose mode has flow control as an option (the kit's, GAIE's) with it on and the declared TTL, unless
    its options say otherwise; another EPP as it is."""
    if not {"flow_control", "default_request_ttl"} <= modes.get(target.mode).option_names:
        return {}
    wanted = {"flow_control": True, "default_request_ttl": target.flow_control_ttl}
    return {k: v for k, v in wanted.items() if k not in target.options}


def topology(target, **options):
    """One pod that runs one request at a time; the EPP with flow control (``options`` on top)."""
    one = target.replace(pods=target.pods[:1])
    return with_pod_args(one.topology(**options_for(target), **options), "--max-num-seqs", "1")


@dataclass
class Probe:
    label: str
    headers: dict[str, str]
    sent: Sent | None = None
    upstream_at: float | None = None  # when Envoy began sending it upstream (monotonic; None: it never did)

    def answered_after(self) -> float:
        return self.sent.result.finished_s - self.sent.result.started_s


@dataclass
class Scenario:
    probes: list[Probe]
    evidence: list[str] = field(default_factory=list)
    freed: list[float] = field(default_factory=list)  # when each slot was freed
    dropped: float = 0.0  # when the rest of the load was dropped
    not_run: Result | None = None


def upstream_at(sent: Sent) -> float | None:
    hop = sent.hop
    value = hop.fields.get("upstream_start_us") if hop is not None else None
    try:
        return sent.result.started_s + float(value) / 1e6
    except (TypeError, ValueError):
        return None


def run(h: EppHarness, bed, probes: list[Probe], *, frees: int, hold_s: float, timeout_s: float) -> Scenario:
    """The pod saturated; ``probes`` through Envoy PROBE_GAP_S apart (HTTP/1.1 and h2c in turn), each waiting up to
    ``timeout_s``; ``hold_s`` later ``frees`` slots freed FREE_GAP_S apart, then the load dropped."""
    ep = bed.backends[0]
    scenario = Scenario(probes)
    client = h.client(bed)
    with BusyLoad(ep.address, ep.model, streams=STREAMS) as load:
        before = until(lambda: scrape(ep.address), over, BUSY_WITHIN_S)
        scenario.evidence.append(f"{STREAMS} long streamed requests sent straight to {ep.name} ({ep.address}, "
                                 f"--max-num-seqs 1); its /metrics then: {load_words(before)}")
        if not over(before):
            scenario.not_run = Result(NOT_RUN, f"{ep.name} would not saturate: its /metrics showed "
                                      f"{load_words(before)} {BUSY_WITHIN_S:g} s after the load was sent",
                                      scenario.evidence)
            return scenario
        time.sleep(SCRAPE_S)
        with ThreadPoolExecutor(max_workers=len(probes)) as workers:
            futures = []
            for i, p in enumerate(probes):
                futures.append(workers.submit(_send, h, bed, client, PROTOCOLS[i % len(PROTOCOLS)], p.headers,
                                              timeout_s))
                time.sleep(PROBE_GAP_S)
            time.sleep(hold_s)
            held = scrape(ep.address)
            scenario.evidence.append(f"{ep.name}'s /metrics with every probe sent: {load_words(held)}")
            for _ in range(frees):
                load.free_one()
                scenario.freed.append(time.monotonic())
                time.sleep(FREE_GAP_S)
            scenario.dropped = time.monotonic()
            load.close()
            for p, future in zip(probes, futures):
                p.sent = future.result()
                p.upstream_at = upstream_at(p.sent)
    if not over(held):
        scenario.not_run = Result(NOT_RUN, f"{ep.name} stopped being saturated before the probes were all queued "
                                  f"(its /metrics: {load_words(held)})", scenario.evidence)
    return scenario


def _send(h: EppHarness, bed, client, protocol: str, headers: dict[str, str], timeout_s: float) -> Sent:
    body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 2}
    result = client.chat(body, headers=headers, timeout_s=timeout_s, protocol=protocol)
    return Sent(result, h.hop(bed, result), protocol)


def pod_said(bed, p: Probe) -> str:
    """The pod's own word on a served probe: its ``llm_request`` span's time in its queue (the mock's trace; an EPP
    that sends a request on into a saturated pod leaves it waiting there)."""
    try:
        trace = bed.wait_for_trace(p.sent.result, ex.rules((Vllm.REQUEST,)), timeout_s=5)
        span = trace.one(name=Vllm.REQUEST, service=Service.VLLM)
    except Exception as exc:  # the spans are a second witness: Envoy's record judges
        return f"{p.label}: no span of the pod found ({type(exc).__name__})"
    queued = span.attributes.get(GenAi.LATENCY_TIME_IN_QUEUE)
    return f"{p.label}: the pod's {Vllm.REQUEST} span says {GenAi.LATENCY_TIME_IN_QUEUE} " + (
        f"{float(queued):.2f} s" if queued is not None else "(not set)")


def shed(p: Probe) -> bool:
    """The EPP answered the probe itself with an error (Envoy's record)."""
    return p.sent.hop is not None and p.sent.result.status >= 400 and from_the_epp(p.sent.hop)


def dropped_header(p: Probe) -> str:
    value = {k.lower(): v for k, v in p.sent.result.headers.items()}.get(DROPPED_REASON)
    return f"{DROPPED_REASON}: {value}" if value else f"no {DROPPED_REASON} header"


def said(p: Probe, scenario: Scenario) -> str:
    """A probe as the client and Envoy saw it, its upstream start against the load's drop."""
    at = "never sent upstream" if p.upstream_at is None else \
        f"sent upstream {p.upstream_at - scenario.dropped:+.2f} s from the load's drop"
    return (f"{p.label} ({p.sent.protocol}): HTTP {p.sent.result.status} after {p.answered_after():.2f} s, {at}; "
            f"{evidence_of(p.sent.hop)}")


def unserved(h: EppHarness, scenario: Scenario, declared_ttl: float) -> Result | None:
    """The first probe that was neither served nor shed by the EPP: the check is not run, in Envoy's words (a probe
    dropped past the TTL while the check freed slots: the machine too slow for the check)."""
    for p in scenario.probes:
        if served(p.sent) or shed(p):
            continue
        return Result(NOT_RUN, f"{p.label} ({p.sent.protocol}) was not served: {cause(p.sent, None)}",
                      scenario.evidence + [said(p, scenario)])
    late = [p for p in scenario.probes if shed(p) and p.answered_after() >= DROP_EARLY * declared_ttl]
    if late:
        return Result(NOT_RUN, f"{late[0].label} waited past the declared TTL ({declared_ttl:g} s) while the check "
                      f"freed the pod's slots: the machine was too slow for the check", scenario.evidence)
    return None


def order(scenario: Scenario) -> list[Probe]:
    """The probes in the order Envoy sent them upstream."""
    return sorted((p for p in scenario.probes if p.upstream_at is not None), key=lambda p: p.upstream_at)


def waves(sent: list[Probe]) -> list[list[Probe]]:
    """The probes in Envoy's order, grouped into the waves the EPP let on at once (upstream starts closer than
    WAVE_S): an order within a wave is Envoy's and the network's, not the EPP's, and is not judged."""
    out: list[list[Probe]] = []
    for p in sent:
        if out and p.upstream_at - out[-1][-1].upstream_at < WAVE_S:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def at_once(scenario: Scenario, grouped: list[list[Probe]], evidence: list[str]) -> Result | None:
    """Not run when the EPP let every queued request on at once: no order of its own to judge."""
    if len(grouped) > 1:
        return None
    return Result(NOT_RUN, f"the EPP let all {len(grouped[0])} queued requests on at once (Envoy sent them upstream "
                  f"within {1000 * (grouped[0][-1].upstream_at - grouped[0][0].upstream_at):.0f} ms of each other, "
                  f"{grouped[0][0].upstream_at - scenario.dropped:+.2f} s from the load's drop) when the pod's first "
                  "slot freed: the order it chose cannot be told from Envoy's record", evidence)


def _common(h: EppHarness, scenario: Scenario) -> Result | None:
    if scenario.not_run is not None:
        return scenario.not_run
    if (why := unserved(h, scenario, h.target.flow_control_ttl)) is not None:
        return why
    shed_ones = [p for p in scenario.probes if shed(p)]
    if shed_ones:
        p = shed_ones[0]
        return judged([f"{p.label} ({p.sent.protocol}) was answered HTTP {p.sent.result.status} by the EPP after "
                       f"{p.answered_after():.2f} s ({dropped_header(p)}) instead of waiting for room"],
                      scenario.evidence + [said(p, scenario)], failing="the EPP shed a request it should queue",
                      passing="", fix="While the pool is saturated, hold the request in the EPP until a pod has "
                                      "room (or its TTL runs out)")
    return None


def _one_pod(bed) -> Result | None:
    if not bed.backends:
        return not_applicable("the pool is empty")
    return not_applicable(why) if (why := off_network(bed.backends[:1])) else None


@check(QUEUED, "an EPP with flow control holds a request while the pool is saturated and serves it once a pod has "
       "room", category=DATA_PLANE, level=SHOULD, source=SOURCE, needs=SERVED, uses=(ONE_RUN, OWN_TESTBED),
       declared=DECLARED)
def queued_then_served(h: EppHarness) -> Result:
    """For an EPP that says it queues (``--flow-control``): its one pod saturated for real (1 running, 5 waiting in
    its ``/metrics``), two requests through Envoy (HTTP/1.1, h2c) wait 1 s; then the load is dropped. Each must be
    served (HTTP 200 from the pod), and Envoy must have sent it upstream only once the load was dropped: an EPP that
    sends it into the saturated pod's queue at once, or sheds it (429), fails."""
    with h.own(QUEUED, topology=topology(h.target)) as bed:
        if (na := _one_pod(bed)) is not None:
            return na
        probes = [Probe(f"request {i + 1}", {}) for i in range(2)]
        scenario = run(h, bed, probes, frees=0, hold_s=1.0, timeout_s=h.target.flow_control_ttl + 10)
        if (early := _common(h, scenario)) is not None:
            return early
        problems = [f"{p.label} ({p.sent.protocol}) was sent upstream {scenario.dropped - p.upstream_at:.2f} s "
                    "before the pod had room: the EPP did not hold it"
                    for p in scenario.probes if p.upstream_at < scenario.dropped - 0.05]
        evidence = scenario.evidence + [said(p, scenario) for p in scenario.probes]
        evidence += [pod_said(bed, p) for p in scenario.probes]
        return judged(problems, evidence, failing="the EPP sent requests on into a saturated pool",
                      passing=f"{len(probes)} of {len(probes)} requests waited in the EPP while the pool was "
                              "saturated and were served once the pod had room",
                      fix="With flow control, a request waits in the EPP while the pool is saturated")


@check("priority-bands", "an EPP with flow control sends a higher priority band first", category=DATA_PLANE,
       level=SHOULD, source=SOURCE, needs=("queued-then-served",), uses=(ONE_RUN, OWN_TESTBED, CONTROL_PLANE),
       declared=DECLARED)
def priority_bands(h: EppHarness) -> Result:
    """For an EPP that says it queues (``--flow-control``): two InferenceObjectives of the testbed's pool,
    ``{LOW[0]}`` (priority {LOW[1]}) and ``{HIGH[0]}`` \\
    (priority {HIGH[1]}); its one pod saturated; two low then two high
    requests (``{OBJECTIVE}``) queued; then the pod's slots freed one at a time, {FREE_GAP_S:g} s apart. By
    Envoy's upstream starts, both high requests must go before either low one (a first-come-first-served queue sends
    the low ones first)."""
    options = {"epp_watch_pool": True} if h.target.mode == ext_proc.MODE.name else {}
    with h.own("priority-bands", topology=topology(h.target, **options)) as bed:
        if (na := _one_pod(bed)) is not None:
            return na
        pool = bed.pool
        if pool is not None:
            for name, priority in (LOW, HIGH):
                pool.add_objective(name, priority)
        named = (f"InferenceObjectives {LOW[0]} (priority {LOW[1]}), {HIGH[0]} (priority {HIGH[1]})"
                 + ("" if pool is not None else " only named in the requests (no control plane in this testbed)"))
        probes = [Probe(f"{kind[0]} {i}", {OBJECTIVE: kind[0]}) for kind in (LOW, HIGH) for i in (1, 2)]
        scenario = run(h, bed, probes, frees=3, hold_s=HOLD_S, timeout_s=h.target.flow_control_ttl + 10)
        scenario.evidence.insert(0, named)
        if (early := _common(h, scenario)) is not None:
            return early
        sent = order(scenario)
        evidence = scenario.evidence + ["Envoy sent them upstream in this order: " + ", ".join(
            f"{p.label} ({p.upstream_at - scenario.dropped:+.2f} s)" for p in sent)]
        grouped = waves(sent)
        if (none := at_once(scenario, grouped, evidence)) is not None:
            return none
        band = {p.label: i for i, wave in enumerate(grouped) for p in wave}
        early = [lo.label for lo in sent if lo.label.startswith(LOW[0])
                 if any(band[hi.label] > band[lo.label] for hi in sent if hi.label.startswith(HIGH[0]))]
        problems = [] if not early else [
            f"an {LOW[0]} request went before an {HIGH[0]} one: " + " then ".join(
                " + ".join(p.label for p in wave) for wave in grouped)]
        return judged(problems, evidence, failing="the EPP did not send the higher band first",
                      passing=f"both {HIGH[0]} requests (priority {HIGH[1]}) went before the {LOW[0]} ones "
                              f"(priority {LOW[1]}) queued before them",
                      fix="Dispatch the highest priority band with a request waiting first")


@check("fairness", "an EPP with flow control takes turns between two flows of one band", category=DATA_PLANE,
       level=SHOULD, source=SOURCE, needs=("queued-then-served",), uses=(ONE_RUN, OWN_TESTBED), declared=DECLARED)
def fairness(h: EppHarness) -> Result:
    """For an EPP that says it queues (``--flow-control``): its one pod saturated; three requests of flow
    ``{FLOW_A}`` then two of ``{FLOW_B}`` (llm-d's ``{FAIRNESS_ID}`` and GAIE's
    ``{FAIRNESS_ID_GAIE}``, one band) queued; then the pod's slots freed one at a time, {FREE_GAP_S:g} s apart. By
    Envoy's upstream starts, no flow may be served more than {MAX_RUN!t} in a row while the other has one waiting (round
    robin serves a, b, a, b, a; a first-come-first-served queue a, a, a, b, b)."""
    with h.own("fairness", topology=topology(h.target)) as bed:
        if (na := _one_pod(bed)) is not None:
            return na
        probes = [Probe(f"{flow} {i}", {FAIRNESS_ID: flow, FAIRNESS_ID_GAIE: flow})
                  for flow, n in ((FLOW_A, 3), (FLOW_B, 2)) for i in range(1, n + 1)]
        scenario = run(h, bed, probes, frees=4, hold_s=HOLD_S, timeout_s=h.target.flow_control_ttl + 10)
        if (early := _common(h, scenario)) is not None:
            return early
        sent = order(scenario)
        flows = [p.label.split()[0] for p in sent]
        evidence = scenario.evidence + ["Envoy sent them upstream in this order: " + ", ".join(
            f"{p.label} ({p.upstream_at - scenario.dropped:+.2f} s)" for p in sent)]
        grouped = waves(sent)
        if (none := at_once(scenario, grouped, evidence)) is not None:
            return none
        # a wave of both flows took turns as far as anyone can tell: it breaks a run
        run_of = longest_run([p.label.split()[0] if len({q.label.split()[0] for q in wave}) == 1 else f"{i}.{j}"
                              for i, wave in enumerate(grouped) for j, p in enumerate(wave)])
        problems = [] if run_of <= MAX_RUN else [
            f"one flow was served {run_of} times in a row while the other waited: " + " then ".join(flows)]
        return judged(problems, evidence, failing="the EPP did not take turns between the flows of one band",
                      passing=f"the two flows took turns (at most {run_of} in a row while the other waited; "
                              f"bound {MAX_RUN})",
                      fix=f"Within a band, take turns between flows ({FAIRNESS_ID}), e.g. round robin")


def longest_run(flows: list[str]) -> int:
    """The longest run of one flow among ``flows`` while another flow still had one to come."""
    longest = 0
    for i, flow in enumerate(flows):
        n = 1
        while i + n < len(flows) and flows[i + n] == flow:
            n += 1
        if any(f != flow for f in flows[i + n:]):
            longest = max(longest, n)
    return longest


@check("ttl-drop", "an EPP with flow control drops a request past its TTL with the status it declares",
       category=DATA_PLANE, level=SHOULD, source=SOURCE, needs=("queued-then-served",), uses=(ONE_RUN, OWN_TESTBED),
       declared=DECLARED)
def ttl_drop(h: EppHarness) -> Result:
    """For an EPP that says it queues (``--flow-control``) with a \\
    request TTL (``--flow-control-ttl``, default {FLOW_CONTROL_TTL_S:g} s)
    and a drop status (``--flow-control-drop-status``, default \\
    {Target.flow_control_drop_status}: llm-d's with endpoints up): its one pod kept
    saturated {TTL_SLACK_S:g} s past the TTL while two \\
    requests (HTTP/1.1, h2c) wait. Each must be answered by the EPP itself
    (Envoy's record) with the declared status and an \\
    OpenAI-style JSON error, no sooner than {DROP_EARLY:g} x the TTL; served,
    or answered early, fails. llm-d's ``{DROPPED_REASON}`` is reported when the EPP sets it."""
    ttl, status = h.target.flow_control_ttl, h.target.flow_control_drop_status
    with h.own("ttl-drop", topology=topology(h.target)) as bed:
        if (na := _one_pod(bed)) is not None:
            return na
        probes = [Probe(f"request {i + 1}", {}) for i in range(2)]
        scenario = run(h, bed, probes, frees=0, hold_s=ttl + TTL_SLACK_S, timeout_s=ttl + TTL_SLACK_S + 10)
        if scenario.not_run is not None:
            return scenario.not_run
        problems, evidence = [], list(scenario.evidence)
        for p in scenario.probes:
            evidence.append(said(p, scenario) + f"; {dropped_header(p)}")
            waited, got = p.answered_after(), p.sent.result.status
            where = f"{p.label} ({p.sent.protocol})"
            if served(p.sent):
                problems.append(f"{where} was served after waiting {waited:.2f} s, past its TTL of {ttl:g} s")
            elif not shed(p):
                problems.append(f"{where} got HTTP {got} not from the EPP ({cause(p.sent, None)})")
            elif got != status:
                problems.append(f"{where} was dropped with HTTP {got}, not the declared {status}")
            elif waited < DROP_EARLY * ttl:
                problems.append(f"{where} was answered {got} after {waited:.2f} s, before its TTL of {ttl:g} s")
            elif not openai_error(p.sent.result.body):
                problems.append(f"{where}'s {got} has no OpenAI-style error body "
                                f"({json.dumps(p.sent.result.body)[:120]})")
        return judged(problems, evidence, failing="the EPP did not drop requests past their TTL as declared",
                      passing=f"{len(probes)} of {len(probes)} requests were dropped by the EPP with HTTP {status} "
                              f"(OpenAI JSON) once past their TTL of {ttl:g} s",
                      fix=f"Drop a request that waited its TTL with {status} and an OpenAI-style error (llm-d: "
                          f"{DROPPED_REASON}: rejected-ttl-expired)")
