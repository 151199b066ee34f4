"""Prefill/decode disaggregation judged black-box, as llm-d's EPP claims it: in a pool whose pods carry
``llm-d.ai/role`` (``prefill``, ``decode``, ``both``), the request's destination is a decode-capable pod and
``x-prefiller-host-port`` (read by the decode pod's sidecar) names a prefill-capable pod of the pool, the one that
then did the prefill. A rule the EPP does not declare (``--pd``) is n/a.

The testbed is the kit's flow ``pd-pool``: one prefill vLLM and two decode pods (a pd-sidecar in front of a decode
vLLM) in one pool, each labelled. Who says what: Envoy's record of each request (the EPP's destination, in its
metadata; the upstream it went to; ``x-prefiller-host-port`` as the EPP set it), and the pods' own spans (the
prefill vLLM's ``llm_request`` with ``vllm.role=prefill`` and ``vllm.kv_transfer_params=do_remote_decode``: it did
the prefill of that request, in the request's trace).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eppkit import modes
from eppkit.conformance.registry import SERVED, check, declared_by
from eppkit.conformance.results import DATA_PLANE, MUST, evidence_of, judged, not_applicable
from eppkit.conformance.witness import NotWitnessed, Sent, call_failures
from eppkit.observability.contract import Service, Vllm
from eppkit.observability.jaeger_client import TraceIncomplete
from eppkit.services.picker import headers, roles

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness
    from eppkit.conformance.results import Result

SOURCE = ("llm-d's P/D disaggregation (llm-d-router: the decode filter by llm-d.ai/role, x-prefiller-host-port for the "
          "routing sidecar; vLLM's kv_transfer_params handshake)")
FLOW = "pd-pool"
PREFILL_PODS, DECODE_PODS = 1, 2
REQUESTS = 4  # per client protocol
TRACE_WAIT_S = 10.0

DECLARED = declared_by(lambda target: target.pd, "the EPP does not say it disaggregates prefill and decode (--pd): "
                       "its P/D decisions are not judged")


@dataclass(frozen=True)
class Pod:
    name: str
    role: str

    def __str__(self) -> str:
        return f"{self.name}, {roles.LABEL}={self.role}"


@dataclass
class PdRequest:
    """One request of the check, as Envoy and the pods saw it."""

    what: str  # "request 1 (h2c)"
    status: int
    destination: str  # the EPP's primary, Envoy's record of the envoy.lb metadata ("" for none)
    upstream: str  # where Envoy sent it
    prefiller: str  # x-prefiller-host-port as Envoy held the request ("" for none)
    prefilled_by: list[str] = field(default_factory=list)  # the pods whose spans say they prefilled it
    traced: bool = True  # its trace was read (a request that was not served has none to read)
    answer: str = ""  # what the client got when it was not served: the error in its answerer's words


def pd_topology(target):
    """The check's testbed: the target's EPP over one pool of PREFILL_PODS prefill and DECODE_PODS decode pods."""
    return dataclasses.replace(target.topology(), flow=FLOW, prefill=PREFILL_PODS, decode=DECODE_PODS)


def _pod(pods: dict[str, Pod], address: str) -> str:
    found = pods.get(address)
    return f"{address} ({found})" if found else f"{address} (no pod of the pool)"


def judge(requests: list[PdRequest], pods: dict[str, Pod]) -> tuple[list[str], list[str]]:
    """(problems, evidence) of the check's requests over ``pods`` (address -> Pod): each request's destination a
    decode-capable pod of the pool and never a prefill-only one where it landed; its x-prefiller-host-port a
    prefill-capable pod of the pool, the one whose spans say it prefilled the request. A request not served has no
    prefill to judge (its destination and its prefiller still are)."""
    problems, evidence = [], []
    names = {address: pod.name for address, pod in pods.items()}
    for r in requests:
        shown = _pod(pods, r.destination) if r.destination else "-"
        said = (f"{r.what}: HTTP {r.status}; the EPP's destination {shown}, Envoy's upstream "
                f"{_pod(pods, r.upstream) if r.upstream else '-'}, {headers.PREFILLER}: "
                f"{_pod(pods, r.prefiller) if r.prefiller else '-'}")
        if r.traced:
            said += "; prefilled, in the pods' spans, by " + (", ".join(r.prefilled_by) or "no pod")
        if r.answer:
            said += f"; the answer: {r.answer}"
        evidence.append(said)
        destination, landed = pods.get(r.destination), pods.get(r.upstream)
        if r.destination and (destination is None or not roles.decode_capable(destination.role)):
            problems.append(f"{r.what}'s destination is {_pod(pods, r.destination)}, not a decode-capable pod")
        elif landed is not None and landed.role == roles.PREFILL:
            problems.append(f"{r.what} landed on {_pod(pods, r.upstream)}, a prefill-only pod")
        prefiller = pods.get(r.prefiller)
        if not r.prefiller:
            problems.append(f"{r.what} named no prefill pod ({headers.PREFILLER}) in a pool with prefill-only pods")
        elif prefiller is None or not roles.prefill_capable(prefiller.role):
            problems.append(f"{r.what}'s {headers.PREFILLER} names {_pod(pods, r.prefiller)}, not a prefill-capable "
                            "pod")
        elif r.traced and r.status == 200 and r.prefilled_by != [names[r.prefiller]]:
            problems.append(f"{r.what} named {prefiller.name} to prefill, but the pods' spans say "
                            f"{', '.join(r.prefilled_by) or 'no pod'} did")
    return problems, evidence


def prefilled_by(trace) -> list[str]:
    """The pods that prefilled the request in their own words: the vLLM ``llm_request`` spans of role prefill that
    were asked ``do_remote_decode`` (vLLM's handshake), by ``vllm.instance``."""
    return sorted(str(s.attributes.get(Vllm.INSTANCE)) for s in trace.spans
                  if s.service == Service.VLLM and s.name == Vllm.REQUEST
                  and s.attributes.get(Vllm.ROLE) == roles.PREFILL
                  and s.attributes.get(Vllm.KV_TRANSFER_PARAMS) == "do_remote_decode")


@check("pd-disaggregation", "a P/D-disaggregating EPP picks a decode pod and names the prefill pod that prefills",
       category=DATA_PLANE, level=MUST, source=SOURCE, needs=SERVED, declared=DECLARED)
def pd_disaggregation(h: EppHarness) -> Result:
    """For an EPP that says it disaggregates prefill and \\
    decode (``--pd``): a pool of {PREFILL_PODS!w} prefill pod (a vLLM,
    ``llm-d.ai/role=prefill``) and {DECODE_PODS!w} decode pods \\
    (a pd-sidecar in front of a vLLM, ``decode``), the roles given to
    the EPP as ``{{pod_roles}}`` (the kit's EPP: its pool's \\
    roles); {REQUESTS!w} requests. Each request's destination (Envoy's
    record of the EPP's metadata) is a decode-capable pod, and it never lands on a prefill-only pod; its
    ``x-prefiller-host-port`` (as Envoy passed it to the sidecar) names a prefill-capable pod of the pool, and that
    pod's own spans in the request's trace say it did the prefill (vLLM's ``kv_transfer_params``:
    ``do_remote_decode``). A request that failed for another cause leaves the check not run."""
    topology = pd_topology(h.target)
    try:
        setup = modes.check(topology)
    except ValueError as exc:
        return not_applicable(f"the kit cannot run this EPP over a disaggregated pool: {exc}")
    if setup.watches_pool:  # the pd-pool flow lays its pods out on the host, not as Pods of an InferencePool
        return not_applicable("the kit cannot run this EPP over a disaggregated pool yet: it watches its pool in a "
                              "control plane, and the pd-pool flow's pods are given by address ({endpoints}, "
                              "{pod_roles}), not as Pods labelled llm-d.ai/role")
    bed = h.bed("pd", topology=topology)
    pods = {ep.address: Pod(ep.name, ep.role if ep.role in roles.ROLES else roles.BOTH) for ep in bed.backends}
    sents = h.send_all(bed, [{"prompt": f"disaggregate request {i}: " + "prefill " * 40} for i in range(REQUESTS)])
    requests = [_observed(i, sent) for i, sent in enumerate(sents)]
    for request, sent in zip(requests, sents):
        if sent.hop is None or call_failures(sent.hop):  # no decision of the EPP's to judge: not run, with the cause
            h.must_serve(sent, request.what)
    problems, evidence = judge(requests, pods)
    if not problems:  # the decisions hold: each request served, and prefilled where the EPP said, in the pods' words
        for request, sent in zip(requests, sents):
            h.must_serve(sent, request.what)
            request.prefilled_by, request.traced = prefilled_by(_trace(bed, request, sent)), True
        problems, evidence = judge(requests, pods)
    evidence.insert(0, "the pool: " + ", ".join(f"{address} ({pod})" for address, pod in pods.items()))
    evidence += [evidence_of(sent.hop) for sent in sents]
    return judged(problems, evidence, failing="the EPP's P/D decisions broke llm-d's roles",
                  passing=f"{REQUESTS} requests went to decode pods, each prefilled by the prefill pod the EPP named",
                  fix=f"Pick the destination among decode-capable pods ({roles.LABEL} decode or both) and name a "
                      f"prefill-capable pod of the pool (prefill or both) in {headers.PREFILLER}")


def _observed(i: int, sent: Sent) -> PdRequest:
    """The request as Envoy recorded it (the EPP's primary destination, the upstream, the prefiller it named)."""
    hop = sent.hop

    def value(key: str) -> str:
        found = str((hop[key] if hop is not None else "") or "").split(",")[0].strip()
        return "" if found == "-" else found

    body = sent.result.body
    error = body.get("error") if isinstance(body, dict) else None
    answer = "" if sent.result.status == 200 else str((error or {}).get("message") if isinstance(error, dict)
                                                      else body or sent.result.error or "")[:200]
    return PdRequest(f"request {i + 1} ({sent.protocol})", sent.result.status, value("destination"), value("upstream"),
                     value("prefiller"), traced=False, answer=answer)


def _trace(bed, request: PdRequest, sent: Sent):
    """The request's whole trace (every span its testbed's mode and flow make); not run when it never is."""
    try:
        return bed.wait_for_trace(sent.result, timeout_s=TRACE_WAIT_S)
    except TraceIncomplete as exc:
        raise NotWitnessed(f"{request.what}: its trace never held every span ({str(exc).splitlines()[0]})",
                           sent) from None
