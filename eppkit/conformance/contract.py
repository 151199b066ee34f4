"""The protocol's contract where no EPP decides: the EPP's own error replies (503 when no endpoint of a subset hint
can serve, with an OpenAI-style body) and the gateway's answer when the EPP is unreachable and fail-closed. Pure
judgements over what Envoy and the client saw; the checks that send the requests are in
:mod:`eppkit.conformance.checks.data_plane`.
"""

from __future__ import annotations

import time
from typing import Callable

from eppkit.conformance.results import evidence_of, judged
from eppkit.conformance.witness import Sent, from_the_epp

ENVOY_WRAPPED = "envoy_local_reply"  # the error type the kit's Envoy gives a local reply whose body was not JSON


def openai_error(body) -> bool:
    """An OpenAI-style error body: ``{"error": {"message": ...}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and isinstance(error.get("message"), str)


def error_body_problem(body) -> str | None:
    """What is wrong with the body of the EPP's own error reply as the client got it, or None (an OpenAI-style error
    the EPP wrote). The kit's Envoy wraps a local reply whose body is not JSON into one of type envoy_local_reply,
    whose message is the EPP's body: such a body was not the EPP's JSON."""
    if not openai_error(body):
        return f"its body is no OpenAI-style error ({str(body)[:120]!r})"
    if body["error"].get("type") == ENVOY_WRAPPED:
        return (f"its body is not JSON ({str(body['error'].get('message'))[:160]!r}: the kit's Envoy wrapped it as "
                f"{ENVOY_WRAPPED}; a gateway without such a mapper hands the client that text)")
    return None


def down(bed, pod: str) -> None:
    """``pod`` stops answering: its Pod not Ready and its mock stopped (a crash) where the pool is in a control plane,
    else its mock killed; once."""
    pool = bed.pool
    if pool is not None:
        if any(p.name == pod and p.ready for p in pool.pods()):
            pool.set_ready(pod, False, stop_server=True)
    else:
        bed.services[pod].process.kill()  # a no-op once it is down


def answered_by_the_epp(send: Callable[[], Sent], within_s: float, interval_s: float = 0.25) -> Sent:
    """``send()`` until the EPP answers a request itself (Envoy's record), at most ``within_s``: that request, or the
    last one sent (the EPP never did)."""
    deadline = time.monotonic() + within_s
    while True:
        sent = send()
        if (sent.hop is not None and from_the_epp(sent.hop)) or time.monotonic() >= deadline:
            return sent
        time.sleep(interval_s)


def fail_closed_problems(sents: list[Sent]) -> list[str]:
    """What broke fail-closed in ``sents``: a request that reached a pod (Envoy's upstream, the pod that answered)
    or was answered other than 5xx."""
    problems = []
    for i, sent in enumerate(sents, 1):
        upstream = sent.hop["upstream"] if sent.hop is not None else None
        if sent.served_by or upstream not in (None, "", "-"):
            problems.append(f"request {i} reached {sent.served_by or upstream} (HTTP {sent.result.status})")
        elif not 500 <= sent.result.status < 600:
            problems.append(f"request {i} got HTTP {sent.result.status or sent.result.error}, not a 5xx")
    return problems


def judge_fail_closed(sents: list[Sent]):
    return judged(fail_closed_problems(sents), [evidence_of(s.hop) for s in sents],
                  failing="with the EPP unreachable and failure_mode_allow false, requests went past the EPP",
                  passing="every request answered 5xx by the gateway, none reached a pod",
                  fix="Keep ext_proc's failure_mode_allow false where the EPP's decision is required")
