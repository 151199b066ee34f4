"""What a check finds: its :class:`Result` (``pass``, ``fail`` with the evidence and what to do, ``n/a`` with why,
``not run`` with the cause), the levels a rule binds at and where rules come from. The bottom of the verdict engine:
the checks, the scheduler and the report all speak it, and it imports none of them.

A check names where its rule comes from (``source``) and how binding it is (``level``): ``must`` (the EPP protocol
of the Gateway API Inference Extension says MUST, or Envoy refuses the request), ``should`` (GAIE's conformance
mechanisms and what a gateway relies on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

PASS, FAIL, NOT_APPLICABLE, NOT_RUN = "pass", "fail", "n/a", "not run"
STATUSES = (PASS, FAIL, NOT_APPLICABLE, NOT_RUN)
MUST, SHOULD = "must", "should"
DATA_PLANE, PROTOCOL, LOAD, LATENCY, TRACING = "data plane", "protocol", "load", "latency", "tracing"
# Where the rules come from (named once; the report links them).
PROTOCOL_DOC = "GAIE EPP protocol (docs/proposals/004-endpoint-picker-protocol)"
GAIE_CONFORMANCE = "GAIE conformance suite (conformance/tests)"
ENVOY_EXT_PROC = "Envoy ext_proc, FULL_DUPLEX_STREAMED (ext_proc.proto)"


@dataclass
class Result:
    status: str
    message: str
    evidence: list[str] = field(default_factory=list)  # Envoy's own words: log lines, stats, what arrived
    seconds: float = 0.0
    blocked: bool = False  # not run because a check it needs failed (or was itself blocked)
    skipped: bool = False  # not run because the run was asked to leave it out (--quick): the verdict's headline says so


def passed(message: str, evidence: list[str] | None = None) -> Result:
    return Result(PASS, message, evidence or [])


def failed(message: str, evidence: list[str] | None = None) -> Result:
    return Result(FAIL, message, evidence or [])


def judged(problems: list[str], evidence: list[str], *, failing: str, passing: str, fix: str = "") -> Result:
    """A check's verdict on what it found: ``fail`` saying ``failing: <each problem>. <fix>`` when it found any,
    else ``pass`` saying ``passing``."""
    if problems:
        return failed(f"{failing}: {'; '.join(problems)}" + (f". {fix}" if fix else ""), evidence)
    return passed(passing, evidence)


def not_applicable(why: str) -> Result:
    return Result(NOT_APPLICABLE, why)


def evidence_of(hop) -> str:
    """One request as Envoy logged it, the fields a reader needs (eppkit.gateway.hop)."""
    if hop is None:
        return "Envoy logged no line for this request"
    fields = {k: hop[k] for k in ("code", "details", "flags", "route", "upstream", "destination",
                                  "destination_header", "served") if hop[k] not in (None, "", "-")}
    try:  # x-prefiller-host-port as Envoy held the request (P/D), where its record has it
        if hop["prefiller"] not in (None, "", "-"):
            fields["prefiller"] = hop["prefiller"]
    except KeyError:
        pass
    statuses = hop.call_statuses()
    if statuses:
        fields["ext_proc call status"] = statuses
    fields["phases (ms)"] = hop.phases()
    return "Envoy's access log: " + json.dumps(fields, separators=(", ", ": "))
