"""The conformance checks: one registry entry each, in the manner of GAIE's conformance tests.

A check judges one rule from Envoy's side (its access log, its ext_proc stats, what reached the backend,
the trace), never from the EPP's word. It returns a :class:`Result`: ``pass``, ``fail`` (with the evidence
and what to do), ``n/a`` (the rule cannot apply to this EPP, and why), or ``not run`` (a check it needs
failed first: an EPP that breaks the reply order fails that check, not every check that sends a body).

Each check names where its rule comes from (``source``) and how binding it is (``level``): ``must`` (the
EPP protocol of the Gateway API Inference Extension says MUST, or Envoy refuses the request), ``should``
(GAIE's conformance mechanisms and what a gateway relies on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from eppkit.core.registry import Registry

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


@dataclass(frozen=True)
class Check:
    name: str  # the check's id: stable, kebab-case (reports and pytest ids use it)
    title: str
    category: str
    level: str
    source: str
    order: int
    run: Callable[..., Result]  # (harness) -> Result
    needs: tuple[str, ...] = ()  # checks whose failure leaves this one not run
    per_protocol: bool = True  # run once per client protocol (HTTP/1.1, h2c); False: its rule has no HTTP in it
    # A rule only some EPPs take on (they say so: the target's flags): (target) -> why it does not apply to this one,
    # or None. The suite reports n/a with that reason without running it; pytest makes no test of it.
    declared: Callable[..., str | None] | None = None
    # Runs in a thread of its own beside the checks after it (on a testbed of its own: Harness.own), up to the
    # first latency check, where the EPP serves streams at once (a long check: the verdict waits for it once).
    beside: bool = False
    # Its figures are times held to a floor's (a plugin's pace, its cost): its protocols run one after the other, never
    # beside each other's requests, even where the subject serves streams at once.
    timed: bool = False
    # Its testbed's EPP watches a pool in a control plane (which a target's mode may otherwise not start): declared,
    # the verdict starts the control plane at its beginning, beside the first checks.
    control_plane: bool = False
    # The soak: long, left out with --quick (the verdict's headline then says so), and judged once per Envoy version
    # matrix, on its first version (the rule is the EPP's own, under load, not Envoy's).
    soak: bool = False

    def not_declared(self, target) -> str | None:
        """Why this check does not apply to ``target`` by what it declares, or None."""
        return self.declared(target) if self.declared is not None else None

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip()


CHECKS: Registry[Check] = Registry("conformance check")
# A plugin's checks (eppkit.conformance.plugin_checks): a registry of their own, so an EPP is never judged by a
# plugin's rules nor a plugin by an EPP's.
PLUGIN_CHECKS: Registry[Check] = Registry("plugin check")
_order = iter(range(10_000))


def check(name: str, title: str, *, category: str, level: str = MUST, source: str = PROTOCOL_DOC,
          needs: tuple[str, ...] = (), per_protocol: bool = True,
          declared: Callable[..., str | None] | None = None, beside: bool = False, timed: bool = False,
          control_plane: bool = False, soak: bool = False,
          registry: Registry[Check] = CHECKS) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register the decorated function (``harness -> Result``) as check ``name`` (an EPP's, or in ``registry``)."""

    def register(fn: Callable[..., Result]) -> Callable[..., Result]:
        registry.register(Check(name, title, category, level, source, next(_order), fn, needs, per_protocol, declared,
                                 beside, timed, control_plane, soak))
        return fn

    return register


def declared_by(flag: str, otherwise: str) -> Callable[..., str | None]:
    """A :attr:`Check.declared` for a rule an EPP takes on only when it says so (the target's ``flag``, set by its
    option): None for such a target, else ``otherwise``, why the rule does not apply."""
    return lambda target: None if target is not None and getattr(target, flag, False) else otherwise


def evidence_of(hop) -> str:
    """One request as Envoy logged it, the fields a reader needs (eppkit.gateway.hop)."""
    if hop is None:
        return "Envoy logged no line for this request"
    fields = {k: hop[k] for k in ("code", "details", "flags", "route", "upstream", "destination",
                                  "destination_header", "served") if hop[k] not in (None, "", "-")}
    statuses = hop.call_statuses()
    if statuses:
        fields["ext_proc call status"] = statuses
    fields["phases (ms)"] = hop.phases()
    return "Envoy's access log: " + json.dumps(fields, separators=(", ", ": "))
