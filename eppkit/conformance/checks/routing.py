"""Routing judged black-box: what EPPs are deployed for, each rule declared by the EPP (``--load-aware``,
``--lora-affinity``; a rule it does not take on is n/a). The pods' own words judge it: their ``/metrics`` as vLLM
writes them (scraped by the check) and the pod each answer names (the mock's ``x-inference-pod``), beside Envoy's
record of where it sent each request.

A check that cannot make its condition (a pod that would not get busy, or would not load an adapter: its metrics do
not show it) is not run, never passed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eppkit.conformance.held import State, envoy_sent, hold
from eppkit.conformance.pods import (
    BUSY_ITL_MS,
    BUSY_STREAMS,
    BUSY_TOKENS,
    BUSY_WITHIN_S,
    KV_USAGE,
    PROBE_GAP_S,  # noqa: F401  (the rules say it)
    RUNNING,
    WAITING,
    BusyLoad,
    load_words,
    metrics_text,
    off_network,
    scrape,
    with_pod_args,
)
from eppkit.conformance.registry import ONE_RUN, OWN_TESTBED, SERVED, check, declared_by
from eppkit.conformance.results import DATA_PLANE, SHOULD, Result, judged, not_applicable
from eppkit.services.openai_server.lora_info import MAX_LORA, LoraInfo
from eppkit.services.openai_server.lora_info import NAME as LORA_INFO
from eppkit.services.openai_server.lora_info import RUNNING as RUNNING_LORAS
from eppkit.services.openai_server.lora_info import WAITING as WAITING_LORAS

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness

LOAD_SOURCE = "GAIE's queue and KV-cache-utilization scorers, llm-d-router's load-aware scorer (vLLM's /metrics)"
MAX_SEQS = 4  # each pod's --max-num-seqs in this check's testbed: requests beyond it wait, as on vLLM
KV_BLOCKS = 256  # each pod's KV cache (blocks of 16 tokens): the busy pod's running streams fill much of it
PROBES = 20  # new requests through Envoy, one every PROBE_GAP_S
SHARE = 0.8  # at least this share of them go to the other pods
BUSY_LOAD = f"{BUSY_STREAMS} streamed requests of {BUSY_TOKENS} tokens ({BUSY_ITL_MS} ms apart)"


LOAD_AWARE = declared_by(lambda target: target.load_aware, "the EPP does not say it is load-aware (--load-aware): "
                         "where it sends a request is not judged by the pods' load")


def busy(metrics: dict[str, float]) -> bool:
    """Requests running and more waiting, and KV-cache blocks in use: the pod is busy in its own words."""
    return metrics.get(RUNNING, 0) >= 1 and metrics.get(WAITING, 0) >= 1 and metrics.get(KV_USAGE, 0) > 0


@check("load-aware", "a load-aware EPP keeps new requests away from a busy pod", category=DATA_PLANE, level=SHOULD,
       source=LOAD_SOURCE, needs=SERVED, declared=LOAD_AWARE, uses=(ONE_RUN, OWN_TESTBED))
def load_aware(h: EppHarness) -> Result:
    """For an EPP that says it routes by load (``--load-aware``; it reads the pods' ``/metrics``): one of three
    pods (each running at most {MAX_SEQS} requests at once, \\
    {KV_BLOCKS} KV-cache blocks) made busy for real, with {BUSY_STREAMS} long streamed
    requests sent straight to it; once its ``/metrics`` shows requests running and waiting and KV-cache blocks in
    use (``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``), and a second
    for the EPP to scrape it, {PROBES} new requests through Envoy, \\
    one every {PROBE_GAP_S:g} s, HTTP/1.1 and h2c in turn: at least {SHARE!p}
    of them are served by the other pods (the pod each answer names). The busy pod's metrics before and after the
    requests are in the evidence; a pod that would not get busy, or stopped being busy before the last request was
    sent, or a request sent only after the load was dropped leaves the check not run. Then the busy streams are
    dropped and every request is served."""
    pods = with_pod_args(h.target.topology(), "--max-num-seqs", str(MAX_SEQS), "--kv-cache-size", str(KV_BLOCKS))
    with h.own("load-aware", topology=pods) as bed:
        return _judge_load_aware(h, bed)


def _judge_load_aware(h: EppHarness, bed) -> Result:
    if len(bed.backends) < 2:
        return not_applicable("the check needs two pods or more: the target's topology has fewer")
    target, others = bed.backends[0], bed.backends[1:]
    if why := off_network([target]):
        return not_applicable(why)
    evidence = [f"{ep.name}'s /metrics at the start: {load_words(scrape(ep.address))}" for ep in bed.backends]
    busy_pod = State(scrape, lambda metrics, _: busy(metrics), load_words, BUSY_LOAD, "get busy", "being busy",
                     BUSY_WITHIN_S)
    held = hold(h, bed, busy_pod, {target.name: (target, BusyLoad(target.address, target.model))}, [{}] * PROBES,
                evidence)
    if held.not_run:
        return held.not_run
    before, sents, evidence = held.before[target.name], held.sents, held.evidence
    for i, sent in enumerate(sents):
        h.must_serve(sent, f"request {i + 1} of {PROBES} while {target.name} was busy")
    went = [sent.served_by for sent in sents]
    counts = {ep.name: went.count(ep.name) for ep in bed.backends}
    evidence.append(f"where the {PROBES} requests went, in order (the pod each answer named): {', '.join(went)}; "
                    f"per pod {counts}")
    evidence += [f"request {i + 1} ({s.protocol}): {envoy_sent(bed, s)}" for i, s in enumerate(sents)
                 if s.served_by == target.name]
    elsewhere = sum(1 for pod in went if pod != target.name)
    share = elsewhere / PROBES
    problems = [] if share >= SHARE else [(
        f"{PROBES - elsewhere} of {PROBES} went to {target.name} while its /metrics showed {load_words(before)}: "
        f"{share:.0%} went to the other pods ({', '.join(ep.name for ep in others)}), under {SHARE:.0%}")]
    return judged(problems, evidence, failing="new requests went to the busy pod",
                  passing=f"{elsewhere} of {PROBES} new requests ({share:.0%}) went to the other pods while "
                          f"{target.name} was busy ({load_words(before)})",
                  fix=f"Score the pods by the load their /metrics show ({WAITING}, {RUNNING}, {KV_USAGE}) and send "
                      "new requests to the least loaded")


# lora-affinity: each pod serves three adapters, at most two loaded at once; two of them are made to run, each on a
# pod of its own, by long streams sent straight to it.
LORA_SOURCE = "GAIE's lora-affinity scorer (vLLM's vllm:lora_requests_info), llm-d-router's and Dynamo's LoRA routing"
ADAPTERS = {"sql-lora": "/adapters/sql", "chat-lora": "/adapters/chat", "code-lora": "/adapters/code"}
MAX_LORAS = 2  # each pod's --max-loras: an anchor pod, one adapter running, still has room
ANCHOR_STREAMS = 2  # long streamed requests for its adapter straight to each anchor pod: the adapter runs there
LOADED_WITHIN_S = 5.0  # the anchor's /metrics must show its adapter running within this, else the check is not run
LORA_PROBES = 20  # new requests through Envoy, one every PROBE_GAP_S, the two adapters in turn


LORA_AFFINITY = declared_by(lambda target: target.lora_affinity, "the EPP does not say it routes LoRA adapters "
                            "(--lora-affinity): where it sends an adapter's requests is not judged")


def lora_of(address: str) -> LoraInfo | None:
    """A pod's adapters, from its ``/metrics`` (``vllm:lora_requests_info``'s latest series); None: it shows none."""
    return LoraInfo.parse(metrics_text(address))


def lora_words(info: LoraInfo | None) -> str:
    return info.words() if info is not None else "no vllm:lora_requests_info"


def _running(info: LoraInfo | None, adapter: str) -> bool:
    """``adapter`` runs on the pod, and the pod has room for another adapter: the state the rule is judged in."""
    return info is not None and adapter in info.running and info.has_room


@check("lora-affinity", "an EPP that routes LoRA adapters sends an adapter's requests where it is running",
       category=DATA_PLANE, level=SHOULD, source=LORA_SOURCE, needs=SERVED,
       declared=LORA_AFFINITY, uses=(ONE_RUN, OWN_TESTBED))
def lora_affinity(h: EppHarness) -> Result:
    """For an EPP that says it routes LoRA adapters (``--lora-affinity``; it reads the pods' ``/metrics``): three
    pods each serve three adapters (``--lora-modules``), at most \\
    {MAX_LORAS!w} loaded at once (``--max-loras {MAX_LORAS}``). Two adapters
    are made to run for real, each on a pod of its own, with \\
    {ANCHOR_STREAMS} long streamed requests sent straight to that pod; once
    each pod's ``/metrics`` shows its adapter in ``running_lora_adapters`` (``vllm:lora_requests_info``, scraped by
    the check), and a second for the EPP to scrape it, \\
    {LORA_PROBES} new requests through Envoy, the two adapters in turn, one
    every {PROBE_GAP_S:g} s, HTTP/1.1 and h2c in turn: at least \\
    {SHARE!p} of each adapter's requests are served by the pod running it
    (the pod each answer names; its ``model`` the adapter), \\
    while that pod has room (one adapter of {MAX_LORAS!w} running). A
    pod that would not run its adapter, or stopped running it before the last request was sent, or a request sent
    only after the load was dropped leaves the check not run. An EPP that ignores the adapter (round robin, or the
    least loaded pod: the third) sends at most half of them there."""
    # vLLM's JSON form of --lora-modules, which the mock, vLLM and llm-d-inference-sim all take
    modules = [json.dumps({"name": name, "path": path}, separators=(",", ":")) for name, path in ADAPTERS.items()]
    pods = with_pod_args(h.target.topology(), "--lora-modules", *modules, "--max-loras", str(MAX_LORAS))
    with h.own("lora-affinity", topology=pods) as bed:
        return _judge_lora_affinity(h, bed)


def _judge_lora_affinity(h: EppHarness, bed) -> Result:
    if len(bed.backends) < 2:
        return not_applicable("the check needs two pods or more: the target's topology has fewer")
    anchors = dict(zip(ADAPTERS, bed.backends[-2:]))  # adapter -> the pod it is made to run on
    if why := off_network(anchors.values()):
        return not_applicable(why)
    evidence = [f"{ep.name}'s /metrics at the start: {lora_words(lora_of(ep.address))}" for ep in bed.backends]
    running = State(lora_of, _running, lora_words, f"{ANCHOR_STREAMS} streamed requests for {{key}}",
                    "run {key} with room to spare", "running {key}", LOADED_WITHIN_S)
    asked = [list(ADAPTERS)[i % len(anchors)] for i in range(LORA_PROBES)]
    loads = {a: (ep, BusyLoad(ep.address, a, streams=ANCHOR_STREAMS)) for a, ep in anchors.items()}
    held = hold(h, bed, running, loads, [{"model": adapter} for adapter in asked], evidence)
    if held.not_run:
        return held.not_run
    before, sents, evidence = held.before, held.sents, held.evidence
    for i, sent in enumerate(sents):
        h.must_serve(sent, f"request {i + 1} of {LORA_PROBES} (model {asked[i]})")
    went = [f"{a}->{s.served_by}" for a, s in zip(asked, sents)]
    evidence.append(f"where the {LORA_PROBES} requests went, in order (adapter->the pod its answer named): "
                    f"{', '.join(went)}")
    evidence += [f"{ep.name}'s /metrics at the end: {lora_words(lora_of(ep.address))}" for ep in bed.backends]
    problems, shares = [], []
    for adapter, ep in anchors.items():
        mine = [(i, s) for i, s in enumerate(sents) if asked[i] == adapter]
        there = sum(1 for _, s in mine if s.served_by == ep.name and (s.result.body or {}).get("model") == adapter)
        shares.append(f"{there} of {len(mine)} {adapter} requests to {ep.name}")
        evidence += [f"request {i + 1} ({s.protocol}, {adapter}): {envoy_sent(bed, s)}" for i, s in mine
                     if s.served_by != ep.name]
        if there < SHARE * len(mine):
            problems.append(f"{len(mine) - there} of {len(mine)} requests for {adapter} went elsewhere while "
                            f"{ep.name}'s /metrics showed {lora_words(before[adapter])}: {there / len(mine):.0%} "
                            f"to {ep.name}, under {SHARE:.0%}")
    return judged(problems, evidence, failing="an adapter's requests went to pods not running it",
                  passing=f"{', '.join(shares)}: each adapter's requests went to the pod running it",
                  fix=f"Read each pod's adapters from its /metrics ({LORA_INFO}: {RUNNING_LORAS}, {WAITING_LORAS}, "
                      f"{MAX_LORA}) and send a request for an adapter to a pod running it while it has room")
