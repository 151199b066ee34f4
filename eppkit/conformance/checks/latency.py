"""The EPP's latency, judged against a budget from Envoy's record of ordinary requests.

Envoy's ext_proc filter times each phase of the exchange (:mod:`eppkit.gateway.hop`): ``epp_decision`` (the end of
the request body to the decision's arrival) and ``epp_release`` (the end of the body to the last body reply: the
body handed back). An EPP can follow every rule and still hold each request for most of a second; the budget says
how long is too long (``eppkit conformance --budget``, its defaults: :class:`eppkit.conformance.budget.Budget`). It
is judged on ordinary requests, a small chat one at a time: a 1.2 MB body takes its parse, and sixteen at once queue
in a single-threaded EPP, which the report's hop table shows but a budget should not mix in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.budget import Budget, CostBudget  # noqa: F401  (where they were first)
from eppkit.conformance.registry import ONE_RUN, SERVED, TIMED, check
from eppkit.conformance.results import LATENCY, SHOULD, failed, passed
from eppkit.observability import steps

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness
    from eppkit.conformance.results import Result


SAMPLES = 10  # ordinary requests, one at a time, half of them over each client protocol


@check("latency-budget", "the EPP decides and releases the body within the budget", category=LATENCY,
       level=SHOULD, source="eppkit (a budget: eppkit conformance --budget)", needs=SERVED, uses=(ONE_RUN, TIMED))
def latency_budget(h: EppHarness) -> Result:
    """{SAMPLES!W} ordinary requests (a small chat, one at a \\
    time, over HTTP/1.1 and h2c): the EPP's decision and its release
    of the body, at the budget's percentile of Envoy's record, within it \\
    (default p{Budget.percentile} ≤ {Budget.decision_ms:g} ms each, on a 2-core VM
    running nothing else; set it for your machine and EPP with ``--budget``). Once enough of them are over it that
    the percentile must be too, the rest are not sent: a slow EPP costs a few requests, not {SAMPLES!w}."""
    from eppkit.observability.client import PROTOCOLS

    bed = h.bed()
    budget = h.budget
    limits = {"epp_decision": budget.decision_ms, "epp_release": budget.release_ms}
    samples: dict[str, list[float]] = {phase: [] for phase in limits}
    allowed_over = SAMPLES - -(-SAMPLES * budget.percentile // 100)  # how many may exceed it at that percentile
    for i in range(SAMPLES):
        sent = h.must_serve(h.on(PROTOCOLS[i % len(PROTOCOLS)]).send(bed), "an ordinary request")
        phases = sent.hop.phases()
        for phase in limits:
            if phase in phases:
                samples[phase].append(phases[phase])
        if any(sum(v > limits[p] for v in values) > allowed_over for p, values in samples.items()):
            break
    evidence, problems = [], []
    for phase, values in samples.items():
        if not values:
            continue
        at = steps.percentile(values, budget.percentile)
        summary = steps.summarize(values)
        evidence.append(f"{phase}: p50 {summary['p50']:.1f} ms, p{budget.percentile} {at:.1f} ms, max "
                        f"{max(values):.1f} ms over {len(values)} requests (Envoy's record); budget "
                        f"{limits[phase]:g} ms")
        if at > limits[phase]:
            problems.append(f"{phase} p{budget.percentile} {at:.1f} ms > {limits[phase]:g} ms")
    if not evidence:
        return failed("Envoy recorded no EPP phase for any of these requests (no ext_proc record)", evidence)
    if problems:
        return failed("the EPP is over its latency budget: " + "; ".join(problems) + ". Every request waits this "
                      "long at the gateway (the hop table shows where); decide and hand the body back sooner, or "
                      "set the budget you hold it to (--budget).", evidence)
    return passed(budget.describe(), evidence)
