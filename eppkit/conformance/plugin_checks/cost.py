"""What the plugin costs a request, from Envoy's own record: its whole time on the request less the backend's
(:meth:`eppkit.gateway.hop.Hop.gateway_ms`), through the plugin against the floor, request by request interleaved.
Envoy has no per-filter timing (envoyproxy/envoy#4547), so the plugin's cost is that difference; a budget
(``eppkit conformance --plugin --budget p50=1ms,p99=5ms``: :class:`eppkit.conformance.checks.latency.CostBudget`)
says how much is too much. A filter that works hard on every request (a regex over the body, a JSON parse, a
busy loop) follows every other rule and still makes each request that much later."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.budget import CostBudget  # noqa: F401  (its rule says the defaults)
from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import TIMED, check
from eppkit.conformance.results import SHOULD, evidence_of, judged
from eppkit.conformance.witness import Sent
from eppkit.observability import steps

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result

LATENCY = "latency"
REQUESTS = 40  # ordinary chats per testbed and protocol, interleaved plugin / floor, after one unmeasured each
AT = (50, 99)
ROUNDS = 2  # a second round of REQUESTS only when p99 alone is over
MOST = REQUESTS * ROUNDS  # chats per testbed when p99 alone is over


def _sent(h: PluginHarness, beds: dict) -> dict[str, list[Sent]]:
    """REQUESTS ordinary chats through each testbed, interleaved (which goes first alternates), each served, with
    Envoy's record of each read once they are all logged."""
    for side, bed in beds.items():  # a fresh connection's first request pays for it: not measured
        h.must_serve(h.send(bed), f"a chat through the {side}")
    results: dict[str, list] = {side: [] for side in beds}
    sides = list(beds)
    for i in range(REQUESTS):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            results[side].append(h.chat(beds[side]))
    sents = {}
    for side, bed in beds.items():
        hops = h.hops_of(bed, results[side])
        sents[side] = [h.must_serve(Sent(r, hop, h.protocol), f"a chat through the {side}")
                       for r, hop in zip(results[side], hops)]
    return sents


def _figures(sents: list[Sent]) -> tuple[list[float], list[float]]:
    """Envoy's time less the backend's, and its request path (first byte to upstream start), each request's (ms)."""
    gateway = [s.hop.gateway_ms() for s in sents]
    path = [s.hop.phases().get("upload", 0.0) + s.hop.phases().get("hold", 0.0) for s in sents]
    return [g for g in gateway if g is not None], path


def _judge(budget, gateway: dict[str, list[float]]) -> tuple[list[str], list[str]]:
    """The evidence and the problems of Envoy's time through the plugin against the floor's, at p50 and p99."""
    evidence, problems = [], []
    noise = steps.percentile(gateway["floor"], AT[-1]) - steps.percentile(gateway["floor"], AT[0])
    for at in AT:
        plugin, base = (steps.percentile(gateway[side], at) for side in ("plugin", "floor"))
        allowed = budget.allowed_ms(at, base)
        if allowed is None:
            evidence.append(f"Envoy's time on a request less the backend's, p{at}: {plugin:.2f} ms through the "
                            f"plugin, {base:.2f} ms on the floor ({plugin - base:+.2f} ms; not judged: give "
                            f"--budget p{at}=MS to judge it)")
            continue
        # the tail may also be as far above the floor's as the floor's own tail is above its median: on a busy
        # machine that spread, not the plugin, is most of a p99
        allowed = max(allowed, noise if at == AT[-1] else 0.0)
        evidence.append(f"Envoy's time on a request less the backend's, p{at}: {plugin:.2f} ms through the plugin, "
                        f"{base:.2f} ms on the floor ({plugin - base:+.2f} ms; the budget allows +{allowed:.2f} ms)")
        if plugin - base > allowed:
            problems.append(f"p{at} {plugin:.2f} ms through the plugin, {base:.2f} ms on the floor: "
                            f"{plugin - base:+.2f} ms > +{allowed:.2f} ms")
    return evidence, problems


@check("cost-within-budget", "the plugin adds no more than its budget to a request", category=LATENCY, level=SHOULD,
       source="eppkit (a budget: eppkit conformance --plugin --budget)", uses=(TIMED,))
def cost_within_budget(h: PluginHarness) -> Result:
    """{REQUESTS!W} ordinary chats through the plugin and \\
    {REQUESTS!w} through the floor, interleaved, after one unmeasured chat on
    each: Envoy's own time on a request (its whole time less the backend's, upstream start to upstream end, from its
    access log) through the plugin is, at p50 and p99, within the budget of the floor's (default: the plugin adds
    p50 ≤ {CostBudget.p50_ms:g} ms or {CostBudget.share!p} of the floor's \\
    figure when that is more; p99 is reported, and judged only when the budget
    names it, allowing at least the floor's own p99 less its \\
    p50, the machine's noise; ``--budget p50=MS,p99=MS``). When p99
    alone is over, {REQUESTS!w} more each and the p99 of \\
    {MOST!w} decides (one slow request in {REQUESTS!w} is a busy machine's as
    often as the plugin's). Every chat must be served on both testbeds."""
    budget = h.budget
    beds = {"plugin": h.bed(), "floor": floor.bed(h)}
    sents = _sent(h, beds)
    for _ in range(ROUNDS):
        gateway, path = {}, {}
        for side, sent in sents.items():
            gateway[side], path[side] = _figures(sent)
        evidence, problems = _judge(budget, gateway)
        if not problems or any(p.startswith("p50") for p in problems) or len(sents["plugin"]) > REQUESTS:
            break
        # only the tail is over: one request in forty is a busy machine's scheduling as often as the plugin's, so
        # forty more each, and the p99 of eighty (one slow request then moves it little) decides
        more = _sent(h, beds)
        sents = {side: sents[side] + more[side] for side in sents}
    evidence.append("its request path (first byte to upstream start), p50: "
                    + ", ".join(f"{steps.percentile(path[side], 50):.2f} ms {side}" for side in path)
                    + f" (over {len(gateway['plugin'])} requests each)")
    slowest = max(sents["plugin"], key=lambda s: s.hop.gateway_ms() or 0.0)
    evidence.append(f"the slowest through the plugin: {evidence_of(slowest.hop)}")
    p50 = {side: steps.percentile(gateway[side], 50) for side in gateway}
    return judged(problems, evidence, failing="the plugin adds more than its budget to Envoy's own time on a request",
                  passing=f"the plugin adds {p50['plugin'] - p50['floor']:+.2f} ms at p50 to Envoy's own time "
                          f"({p50['plugin']:.2f} ms, floor {p50['floor']:.2f} ms; {budget.describe()})",
                  fix="Do less per request (no loop or parse on every request; cache what does not change), or set "
                      "the budget you hold it to (--budget p50=MS,p99=MS)")
