"""No pass without a witness: what became of a request a check sent, and why, in Envoy's words.

A check judges its rule only on requests that were served as it intended: the status it expects, every
ext_proc phase's call status 0, the backend reached when it should be. A request that was not is never
evidence for a pass: the check fails (when what went wrong *is* its rule) or is not run, naming the true
cause read from Envoy's record of the request (its access-log line, :mod:`eppkit.gateway.hop`) and from
what the client saw (a status, a reset, no answer at all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eppkit.conformance.bodydiff import byte_counts
from eppkit.gateway.hop import Hop
from eppkit.observability.client import ClientResult
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_POD

# gRPC status codes, as Envoy's ext_proc filter records a phase's call status (0: the EPP answered).
GRPC_CODES = {0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
              7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION", 12: "UNIMPLEMENTED",
              13: "INTERNAL", 14: "UNAVAILABLE", 16: "UNAUTHENTICATED"}
# What a non-zero call status means for an EPP, in a reader's words.
CALL_MEANING = {
    14: "the EPP refused or dropped the gRPC stream",
    4: "the EPP did not answer within Envoy's message timeout",
    9: "a reply came for a phase Envoy was not waiting for",
    12: "the EPP does not implement ext_proc's Process",
    13: "the EPP's gRPC server failed",
    2: "the EPP's stream ended with an error",
    8: "the EPP refused the stream (resource exhausted)",
    1: "the stream was cancelled",
}
PHASE_WORDS = {"request_header_call_status": "request headers", "request_body_last_call_status": "request body",
               "request_trailer_call_status": "request trailers", "response_header_call_status": "response headers",
               "response_body_last_call_status": "response body", "response_trailer_call_status": "response trailers"}


@dataclass
class Sent:
    """One request a check sent, what the client got, and Envoy's record of it (None: Envoy logged none)."""

    result: ClientResult
    hop: Hop | None
    protocol: str = "http/1.1"

    @property
    def served_by(self) -> str | None:
        """The pod that answered (the mock names itself), or None."""
        return self.result.headers.get(HEADER_POD)


def call_failures(hop: Hop | None) -> dict[str, int]:
    """The ext_proc phases whose call did not end OK: phase -> gRPC status."""
    return {k: v for k, v in (hop.call_statuses() if hop is not None else {}).items() if v != 0}


def describe_calls(failures: dict[str, int]) -> str:
    parts = []
    for field, code in failures.items():
        meaning = CALL_MEANING.get(code, "the gRPC call failed")
        parts.append(f"{PHASE_WORDS.get(field, field)}: call status {code} {GRPC_CODES.get(code, '')}".rstrip()
                     + f" ({meaning})")
    return "; ".join(parts)


def backend_said(sent: Sent) -> str | None:
    """What the backend said of a request it answered with an error: its words, and (the mock says what it
    received) how many bytes of the body arrived of the client's when not all of them did."""
    result = sent.result
    if sent.served_by is None or result.status < 400:
        return None
    error = result.body.get("error") if isinstance(result.body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    said = f"the backend ({sent.served_by}) answered HTTP {result.status}"
    said += f": {str(message)[:160]}" if message else ""
    got = result.headers.get(HEADER_BODY_BYTES, "")
    if got.isdigit() and result.request_bytes is not None and int(got) != result.request_bytes:
        said += f"; of the request's body {byte_counts(result.request_bytes, int(got))}: data lost on the way"
    return said


def stream_cut(result: ClientResult, tokens: int) -> str | None:
    """How a streamed answer of ``tokens`` tokens fell short (its tokens that arrived, no ``[DONE]``), or None when it
    came whole."""
    done = bool(result.events) and bool(result.events[-1].get("done"))
    if done and len(result.tokens) == tokens:
        return None
    return f"{len(result.tokens)} of {tokens} tokens arrived" + ("" if done else ", and no [DONE]")


def cause(sent: Sent, timeout_s: float | None = None) -> str:
    """What happened to a request, in Envoy's words where it has any: the client's status or error, Envoy's
    response details and flags, the ext_proc call statuses that were not OK; the backend's words when it answered
    with an error (backend_said)."""
    result, hop = sent.result, sent.hop
    backend = backend_said(sent)
    if hop is None:
        if result.error or not result.status:
            waited = f" after {timeout_s:g} s" if timeout_s else ""
            return (f"no answer{waited} ({result.error or 'nothing came back'}); Envoy logged no line for it: the "
                    "request was still open, an ext_proc phase left unanswered")
        return f"HTTP {result.status}; Envoy logged no line for it" + (f"; {backend}" if backend else "")
    words = [f"HTTP {result.status or hop.code}"]
    details = str(hop["details"] or "")
    if details not in ("", "-", "via_upstream"):
        words.append(f"Envoy's details {details}")
    grpc_error = re.match(r"ext_proc_error_gRPC_error_(\d+)", details)
    if grpc_error and not call_failures(hop):  # the stream failed before any phase's call was recorded
        code = int(grpc_error.group(1))
        words.append(f"the ext_proc stream ended with gRPC status {code} {GRPC_CODES.get(code, '')}".rstrip()
                     + f" ({CALL_MEANING.get(code, 'the gRPC call failed')})")
    if hop["flags"] not in (None, "", "-"):
        words.append(f"flags {hop['flags']}")
    failures = call_failures(hop)
    if failures:
        words.append(describe_calls(failures))
    if backend:
        words.append(backend)
    if result.error:
        words.append(f"the client: {result.error}")
    return ", ".join(words)


def served(sent: Sent, *, status: int = 200, backend: bool = True) -> bool:
    """The request got ``status``, no ext_proc phase failed, and (with ``backend``) a backend answered it."""
    if sent.hop is None or sent.result.status != status or sent.result.error:
        return False
    if call_failures(sent.hop) or str(sent.hop["details"] or "").startswith("ext_proc_error"):
        return False
    return not backend or (sent.served_by is not None and sent.hop["upstream"] not in (None, "", "-"))


class NotWitnessed(Exception):
    """A check's request was not served as it intended, for a cause that is not the check's own rule: the check
    is not run (never passed), with that cause."""

    def __init__(self, what: str, sent: Sent, timeout_s: float | None = None):
        self.sent = sent
        super().__init__(f"{what}: {cause(sent, timeout_s)}")


# Response code details of the local replies Envoy makes itself (not the EPP's).
ENVOYS_OWN = ("no_healthy_upstream", "upstream_", "ext_proc_error", "route_not_found", "cluster_not_found",
              "maintenance_mode", "spurious_message", "request_overall_timeout", "downstream_")


def from_the_epp(hop) -> bool:
    """Envoy's record says the EPP answered the request itself (an ImmediateResponse): its ext_proc filter state
    says so on Envoy 1.38 and later; before, a reply that went to no upstream with details Envoy does not make."""
    said = hop.ext_proc.get("received_immediate_response")
    if said is not None:
        return bool(said)
    details = str(hop["details"] or "")  # the EPP's own details (empty when it gives none), or Envoy's
    return hop["upstream"] in (None, "", "-") and not details.startswith(ENVOYS_OWN)
