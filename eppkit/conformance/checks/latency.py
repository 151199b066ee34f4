"""The EPP's latency, judged against a budget from Envoy's record of every request the suite sent.

Envoy's ext_proc filter times each phase of the exchange (:mod:`eppkit.gateway.hop`): ``epp_decision`` (the end of
the request body to the decision's arrival; a GET's true round trip) and ``epp_release`` (the end of the body to
the last body reply: the body handed back). An EPP can follow every rule and still hold each request for most of
a second; the budget says how long is too long (``eppkit conformance --budget``, defaults below).
"""

from __future__ import annotations

from dataclasses import dataclass

from eppkit.conformance.checks.protocol import SERVES
from eppkit.conformance.checks.registry import LATENCY, SHOULD, check, failed, passed
from eppkit.observability import steps


@dataclass(frozen=True)
class Budget:
    """How long the EPP may take, at a percentile of the suite's served requests (ms)."""

    decision_ms: float = 50.0
    release_ms: float = 50.0
    percentile: int = 99

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """``decision=50ms,release=80ms,p=99`` (any subset; ``ms`` optional); ValueError naming what is wrong."""
        values: dict = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip().removesuffix("ms")
            try:
                if not sep or key not in ("decision", "release", "p"):
                    raise ValueError
                number = float(value)
                if number <= 0 or (key == "p" and not (50 <= number <= 100)):
                    raise ValueError
            except ValueError:
                raise ValueError(f"--budget {part!r}: give decision=<ms>, release=<ms> and p=<50-100>, e.g. "
                                 "decision=50ms,release=50ms,p=99") from None
            values["percentile" if key == "p" else f"{key}_ms"] = int(number) if key == "p" else number
        return cls(**values)

    def describe(self) -> str:
        return f"p{self.percentile} decision ≤ {self.decision_ms:g} ms, release ≤ {self.release_ms:g} ms"


EXTRA = 10  # requests the check sends itself, at once, so a small suite still has a sample


@check("latency-budget", "the EPP decides and releases the body within the budget", category=LATENCY,
       level=SHOULD, source="eppkit (a budget: eppkit conformance --budget)", needs=SERVES, per_protocol=False)
def latency_budget(h):
    """Over every served request of the suite (Envoy's record), and ten more sent at once: the EPP's decision and
    its release of the body, at the budget's percentile, within it (default p99 ≤ 50 ms each, on a 2-core VM
    running nothing else; set it for your machine and EPP with ``--budget``)."""
    bed = h.bed()
    h.concurrently(bed, EXTRA, lambda: h.chat(bed))
    budget = h.budget
    samples: dict[str, list[float]] = {"epp_decision": [], "epp_release": []}
    for hop in h.hops():
        if hop.code == 200:
            for phase, ms in hop.phases().items():
                if phase in samples:
                    samples[phase].append(ms)
    limits = {"epp_decision": budget.decision_ms, "epp_release": budget.release_ms}
    evidence, problems = [], []
    for phase, values in samples.items():
        if not values:
            continue
        at = steps.percentile(values, budget.percentile)
        summary = steps.summarize(values)
        evidence.append(f"{phase}: p50 {summary['p50']:.1f} ms, p90 {summary['p90']:.1f} ms, p{budget.percentile} "
                        f"{at:.1f} ms over {len(values)} requests (Envoy's record); budget {limits[phase]:g} ms")
        if at > limits[phase]:
            problems.append(f"{phase} p{budget.percentile} {at:.1f} ms > {limits[phase]:g} ms")
    if not evidence:
        return failed("Envoy recorded no EPP phase for any served request (no ext_proc record)", evidence)
    if problems:
        return failed("the EPP is over its latency budget: " + "; ".join(problems) + ". Every request waits this "
                      "long at the gateway (the hop table shows where); decide and hand the body back sooner, or "
                      "set the budget you hold it to (--budget).", evidence)
    return passed(budget.describe(), evidence)
