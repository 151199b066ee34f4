"""The long-prompt curve: for a scenario whose prompts come in sizes (``prompt-sizes``: 1 to 256 KiB), each mode's
TTFT, gateway time and EPP hop per prompt size, p50 — what sending a longer body through the EPP costs, per body path
(eppkit.compare.bodypaths). A table on the console, in summary.md and report.html; a chart in report.html
(eppkit.compare.charts.prompt_sizes_chart)."""

from __future__ import annotations

from eppkit.compare import tables
from eppkit.observability import steps as st

# (what, where in a sample): the client's TTFT, Envoy before the upstream, the EPP hop as Envoy recorded it.
MEASURES = (("ttft", "steps"), ("gateway", "steps"), ("hold", "hop"))


def curve(samples: list[dict]) -> list[dict]:
    """One point per prompt size the samples have (``prompt_kb``), smallest first: requests, and p50 of each of
    :data:`MEASURES` over the successful ones; [] when no sample has a size."""
    sizes = sorted({s["prompt_kb"] for s in samples if s.get("prompt_kb")})
    points = []
    for kb in sizes:
        ok = [s for s in samples if s.get("prompt_kb") == kb and s.get("ok")]
        point: dict = {"kb": kb, "requests": len(ok)}
        for name, where in MEASURES:
            values = [v for s in ok if (v := (s.get(where) or {}).get(name)) is not None]
            p50 = st.percentile(values, 50)
            point[name] = None if p50 is None else round(p50, 3)
        points.append(point)
    return points


def cell(point: dict | None) -> str:
    """One point's "ttft / gateway / hold" p50 (ms); "–" for none."""
    return "–" if point is None else " / ".join(tables.fmt(point.get(name), 2) for name, _ in MEASURES)


def table(block: dict) -> tables.Table | None:
    """Rows: prompt sizes; a column per mode: "ttft / gateway / hold" p50 (ms). None without a curve."""
    modes = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok" and r.get("by_prompt_kb")]
    if not modes:
        return None
    by_mode = {m: {p["kb"]: p for p in block["modes"][m]["by_prompt_kb"]} for m in modes}
    sizes = sorted({kb for points in by_mode.values() for kb in points})
    rows = []
    for kb in sizes:
        cells = []
        for m in modes:
            p = by_mode[m].get(kb)
            cells.append(cell(p))
        rows.append([f"{kb} KiB"] + cells)
    return tables.Table(
        "Per prompt size, p50 ms: TTFT / gateway / hold", ("prompt",) + tuple(modes), rows,
        notes=["TTFT: the client's first token; gateway: Envoy's ingress start to its upstream request's start; hold: "
               "what Envoy waited between the end of the request and the upstream's start, from its own record "
               "(the EPP hop). Streaming the body through the EPP shows as a hold that grows with the size."])

