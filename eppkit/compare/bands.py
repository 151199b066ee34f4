"""Each priority band's figures in a scenario of bands (``saturated``): for each run, each band's requests served,
their TTFT (p50 / p99) and what Envoy waited for the EPP before sending them on (its ``hold``: the wait in a queueing
EPP), and those dropped, by status (429, 503) and by who answered in Envoy's record (the EPP's own
reply is ``epp_<its code>``: ``epp_shed`` for GAIE's saturation rule, ``epp_rejected-ttl-expired`` for flow
control's TTL). One table (console, summary.md, report.html), the band's shedding run beside its queueing run
(eppkit.compare.admission), so queueing and shedding read side by side.

A band is an InferenceObjective of the testbed's pool with its priority (eppkit.workload.Scenario.bands), made in
the testbed's control plane as soon as it runs; each request names its band's in GAIE's header.
"""

from __future__ import annotations

from eppkit.compare import tables
from eppkit.compare.loadmetrics import value
from eppkit.observability import steps as st
from eppkit.workload import Scenario

DROPS = (429, 503)  # the statuses of a request the EPP would not send on: shed, past its TTL, no endpoint
NOT_RECORDED = "not in Envoy's record"
UNSAID = "the EPP's own answer, no details"  # an immediate response whose EPP set no details (GAIE's v1.5.0)


def who_answered(hop) -> str:
    """Who answered a failed request, in Envoy's record (:class:`eppkit.gateway.hop.Hop`): its details (the kit's EPP:
    ``epp_<code>``), else whether the EPP answered it itself."""
    if hop["details"]:
        return str(hop["details"])
    return UNSAID if hop.ext_proc.get("received_immediate_response") else "no details"


def tell(bed, scenario: Scenario) -> bool:
    """Make the scenario's bands InferenceObjectives of the testbed's pool; False when the testbed has no control
    plane (its EPP, if any, cannot learn them: every request has GAIE's default priority, 0)."""
    pool = getattr(bed, "pool", None)
    if pool is None:
        return False
    for name, priority in scenario.bands:
        pool.add_objective(name, priority)
    return True


def _count(into: dict[str, int], what: str) -> None:
    into[what] = into.get(what, 0) + 1


def summarize(samples: list[dict], declared: tuple[tuple[str, int], ...]) -> list[dict]:
    """One entry per band of ``declared`` (in its order): requests sent and served, TTFT (the trace's, else the
    client's) and Envoy's hold over the served ones, dropped ones by status and by Envoy's details, other failures by
    kind."""
    out = []
    for name, priority in declared:
        mine = [s for s in samples if s.get("band") == name]
        served = [s for s in mine if s.get("ok")]
        ttft = [v for s in served if (v := value(s, "ttft")) is not None]
        hold = [v for s in served if (v := (s.get("hop") or {}).get("hold")) is not None]
        dropped: dict[str, int] = {}
        said: dict[str, int] = {}
        errors: dict[str, int] = {}
        for s in mine:
            if s.get("ok"):
                continue
            if s.get("status") in DROPS:
                _count(dropped, str(s["status"]))
                _count(said, s.get("envoy_details") or NOT_RECORDED)
            else:
                _count(errors, s.get("error") or "unknown")
        out.append({"band": name, "priority": priority, "sent": len(mine), "served": len(served),
                    "ttft": st.summarize(ttft) if ttft else None, "hold": st.summarize(hold) if hold else None,
                    "dropped": dropped, "dropped_by": said,
                    "errors": errors})
    return out


def _drops(band: dict) -> str:
    drops = ", ".join(f"{status}×{n}" for status, n in sorted(band["dropped"].items()))
    said = ", ".join(f"{what}×{n}" for what, n in sorted(band["dropped_by"].items()))
    return f"{drops} ({said})" if drops else "0"


COLUMNS = ("band", "run", "admission", "served/sent", "TTFT p50", "p99", "hold p50", "dropped (Envoy's details)",
           "other errors")


def table(block: dict) -> tables.Table | None:
    """Rows: each band (highest priority first), then each run that ran; None outside a scenario of bands."""
    runs = [(key, r) for key, r in block.get("modes", {}).items() if r.get("status") == "ok" and r.get("by_band")]
    if not runs:
        return None
    order = sorted({(b["priority"], b["band"]) for _, r in runs for b in r["by_band"]}, reverse=True)
    rows = []
    for priority, name in order:
        for key, r in runs:
            band = next((b for b in r["by_band"] if b["band"] == name), None)
            if band is None:
                continue
            ttft, hold = band["ttft"] or {}, band.get("hold") or {}
            errors = ", ".join(f"{kind}×{n}" for kind, n in sorted(band["errors"].items())) or "0"
            rows.append([f"{name} ({priority})", key, r.get("admission") or "–",
                         f"{band['served']}/{band['sent']}", tables.fmt(ttft.get("p50")), tables.fmt(ttft.get("p99")),
                         tables.fmt(hold.get("p50")), _drops(band), errors])
    return tables.Table(
        "Per priority band: TTFT (ms) of the requests served, and those dropped", COLUMNS, rows,
        notes=["Band: the request's InferenceObjective (x-gateway-inference-objective) and its priority; a negative "
               "one is sheddable. Admission: shedding, the EPP sheds a sheddable request while the pool is "
               "saturated (GAIE's rule); queueing, flow control holds every request in the EPP, the highest band "
               "first, up to its TTL; –: the run's EPP could not learn the bands (no control plane) or there is "
               "none. TTFT: the client's first token, the time a request waited in the EPP included; hold: what "
               "Envoy waited between the end of the request and the upstream's start, from its own record. Dropped: "
               "answered 429 or 503; Envoy's details say who answered (epp_<code>: the EPP itself)."], left=3)
