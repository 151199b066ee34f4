"""Saturation judged black-box: an EPP that says it sheds sheddable work when the whole pool is saturated
(``--saturation``; GAIE's rule) answers 429 to a request whose InferenceObjective has a negative priority, and
serves one whose priority is 0 or more. A rule the EPP does not declare is n/a.

The pool is made saturated for real, every pod over GAIE's default thresholds in its own words (its ``/metrics``,
scraped by the check, as in :mod:`eppkit.conformance.checks.routing`); the objectives are InferenceObjectives in
the testbed's control plane, named by each request in GAIE's header. A pool that would not saturate leaves the
check not run, never passed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eppkit.conformance.contract import openai_error
from eppkit.conformance.held import State, hold
from eppkit.conformance.pods import (
    BUSY_WITHIN_S,
    KV_USAGE,
    PROBE_GAP_S,  # noqa: F401  (its rule says it)
    WAITING,
    BusyLoad,
    load_words,
    off_network,
    scrape,
    with_pod_args,
)
from eppkit.conformance.registry import CONTROL_PLANE, ONE_RUN, OWN_TESTBED, SERVED, check, declared_by
from eppkit.conformance.results import DATA_PLANE, SHOULD, Result, evidence_of, judged, not_applicable
from eppkit.conformance.witness import from_the_epp
from eppkit.modes import ext_proc
from eppkit.services.picker.headers import OBJECTIVE
from eppkit.services.picker.saturation import KV_CACHE_UTIL_THRESHOLD, QUEUE_DEPTH_THRESHOLD

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

SOURCE = ("GAIE's saturation detector and admission control (v1.5.0: pkg/epp/requestcontrol/admission.go, "
          "saturationdetector/utilization; InferenceObjective priority < 0 is sheddable)")
MAX_SEQS = 2  # each pod's --max-num-seqs in this check's testbed: requests beyond it wait, as on vLLM
STREAMS = 8  # long streamed requests straight to each pod: 2 running, 6 waiting, over GAIE's queue depth of 5
# The objectives the check makes (name, priority): GAIE's sheddable (negative) and the lowest that is not.
SHEDDABLE, STANDARD = ("eppkit-sheddable", -1), ("eppkit-standard", 0)
PROBES = 12  # new requests through Envoy, one every 0.1 s: two sheddable, two standard, ... HTTP/1.1 and h2c in turn


DECLARED = declared_by(lambda target: target.saturation, "the EPP does not say it sheds sheddable requests when the "
                       "pool is saturated (--saturation): its answers to them are not judged")


def over(metrics: dict[str, float]) -> bool:
    """The pod is over GAIE's default thresholds in its own words: its waiting queue at 5 or more, or its KV cache
    at 0.8 or more used."""
    return metrics.get(WAITING, 0) >= QUEUE_DEPTH_THRESHOLD or metrics.get(KV_USAGE, 0) >= KV_CACHE_UTIL_THRESHOLD


def kind_of(i: int) -> tuple[str, int]:
    """Probe ``i``'s objective: two sheddable, two standard, ... (each kind in both client protocols)."""
    return SHEDDABLE if (i // 2) % 2 == 0 else STANDARD


def topology(target):
    """The check's testbed: each pod running at most MAX_SEQS requests; the kit's EPP watching the pool (and its
    InferenceObjectives) in the control plane, as GAIE's does."""
    options = {"epp_watch_pool": True} if target.mode == ext_proc.MODE.name else {}
    return with_pod_args(target.topology(**options), "--max-num-seqs", str(MAX_SEQS))


def judge(sents, names: dict[str, str]) -> tuple[list[str], list[str], int, int]:
    """(problems, evidence, shed, served) of the probes: each sheddable one answered 429 by the EPP with an
    OpenAI-style error, each standard one served (not shed)."""
    problems, evidence, shed, served = [], [], 0, 0
    for i, sent in enumerate(sents):
        name, priority = kind_of(i)
        status, hop = sent.result.status, sent.hop
        where = f"request {i + 1} ({sent.protocol}, {OBJECTIVE}: {name}, priority {priority})"
        if priority < 0:
            if status == 429 and hop is not None and from_the_epp(hop) and openai_error(sent.result.body):
                if not shed:  # the first, as the client and Envoy saw it
                    evidence.append(f"{where}: HTTP 429, {json.dumps(sent.result.body)[:300]}; {evidence_of(hop)}")
                shed += 1
                continue
            evidence.append(f"{where}: HTTP {status}; {evidence_of(hop)}")
            if status == 429 and hop is not None and from_the_epp(hop):
                problems.append(f"{where} got 429 from the EPP but its body is no OpenAI-style error "
                                f"({str(sent.result.body)[:120]!r})")
            elif status == 200:
                up = hop["upstream"] if hop is not None else "?"
                problems.append(f"{where} was served (by {names.get(up, up)}) while every pod was saturated")
            else:
                problems.append(f"{where} got HTTP {status}, not the EPP's 429")
        elif status == 429:
            evidence.append(f"{where}: HTTP 429; {evidence_of(hop)}")
            problems.append(f"{where} was shed: a priority of 0 or more is never sheddable")
        else:
            served += 1
    return problems, evidence, shed, served


@check("saturation", "an EPP that sheds by priority: a sheddable request gets 429 while the pool is saturated, "
       "others are served", category=DATA_PLANE, level=SHOULD, source=SOURCE, needs=SERVED,
       declared=DECLARED, uses=(ONE_RUN, OWN_TESTBED, CONTROL_PLANE))
def saturation(h: EppHarness) -> Result:
    """For an EPP that says it sheds sheddable work when the pool is saturated (``--saturation``; GAIE's rule):
    two InferenceObjectives of the testbed's InferencePool in its control plane, ``{SHEDDABLE[0]}``
    (priority {SHEDDABLE[1]}) and ``{STANDARD[0]}`` (priority \\
    {STANDARD[1]}); every pod (each running at most {MAX_SEQS} requests at once) made
    saturated for real with {STREAMS} long streamed requests sent straight to it, until its ``/metrics`` shows it over
    GAIE's default thresholds (``{WAITING}`` \\
    {QUEUE_DEPTH_THRESHOLD} or more, or ``{KV_USAGE}`` {KV_CACHE_UTIL_THRESHOLD:g} or
    more); then, a second for the EPP to scrape them, {PROBES} \\
    requests through Envoy, one every {PROBE_GAP_S:g} s, HTTP/1.1 and h2c
    in turn, each naming an objective in ``x-gateway-inference-objective``: every sheddable one is answered 429 by
    the EPP itself (Envoy's record) with an OpenAI-style JSON error, every standard one is served once the pods'
    streams are dropped. The pods' metrics before and after are in the evidence; a pod that would not saturate,
    or stopped being saturated before the last request was sent, leaves the check not run. The kit's EPP reads
    the objectives from the control plane (mode ext_proc, ``epp_watch_pool``); an EPP of your own reads them
    where its command's ``{{kubeconfig}}`` and ``{{pool_namespace}}`` say (without them, the testbed has no control
    plane and the objectives are only named)."""
    with h.own("saturation", topology=topology(h.target)) as bed:
        return _judge_saturation(h, bed)


def _judge_saturation(h: EppHarness, bed) -> Result:
    if not bed.backends:
        return not_applicable("the pool is empty")
    if why := off_network(bed.backends):
        return not_applicable(why)
    pool = bed.pool
    if pool is not None:
        for name, priority in (SHEDDABLE, STANDARD):
            pool.add_objective(name, priority)
        evidence = [(f"InferenceObjectives of InferencePool {pool.target.name} in namespace {pool.target.namespace}: "
                     f"{SHEDDABLE[0]} (priority {SHEDDABLE[1]}), {STANDARD[0]} (priority {STANDARD[1]})")]
    else:
        evidence = [(f"no control plane in this testbed (the EPP's command takes no {{kubeconfig}}): the objectives "
                     f"{SHEDDABLE[0]} (priority {SHEDDABLE[1]}) and {STANDARD[0]} (priority {STANDARD[1]}) are "
                     "only named in the requests")]
    saturated = State(scrape, lambda metrics, _: over(metrics), load_words, f"{STREAMS} long streamed requests",
                      "saturate", "being saturated", BUSY_WITHIN_S, f" (GAIE's thresholds: {QUEUE_DEPTH_THRESHOLD} "
                      f"waiting, KV cache {KV_CACHE_UTIL_THRESHOLD:g})")
    held = hold(h, bed, saturated, {ep.name: (ep, BusyLoad(ep.address, ep.model, streams=STREAMS))
                                    for ep in bed.backends},
                [{"headers": {OBJECTIVE: kind_of(i)[0]}} for i in range(PROBES)], evidence)
    if held.not_run:
        return held.not_run
    sents, evidence = held.sents, held.evidence
    for i, sent in enumerate(sents):
        if kind_of(i)[1] >= 0 and sent.result.status != 429:
            h.must_serve(sent, f"request {i + 1} of {PROBES} (priority {kind_of(i)[1]})")
    problems, said, shed, served = judge(sents, {ep.address: ep.name for ep in bed.backends})
    evidence.append("the answers, in order: " + ", ".join(f"{kind_of(i)[0]}->{s.result.status}"
                                                          for i, s in enumerate(sents)))
    evidence += said
    sheddable = sum(1 for i in range(PROBES) if kind_of(i)[1] < 0)
    return judged(problems, evidence, failing="the saturated pool's requests were not answered by their priority",
                  passing=f"{shed} of {sheddable} sheddable requests got 429 from the EPP (OpenAI JSON) and "
                          f"{served} of {PROBES - sheddable} of priority 0 were served while every pod was saturated",
                  fix=f"Read each request's InferenceObjective ({OBJECTIVE}) and its spec.priority; while the pool "
                      f"is saturated ({WAITING} at {QUEUE_DEPTH_THRESHOLD} or {KV_USAGE} at "
                      f"{KV_CACHE_UTIL_THRESHOLD:g} on the pods, GAIE's defaults) answer a negative priority 429 "
                      "with an OpenAI-style error, and serve the others")
