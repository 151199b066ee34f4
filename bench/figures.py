"""The figures the suite's Markdown (:mod:`bench.render`) and its targets (:mod:`bench.targets`) both read off one
report: the fixed-rate attacks that ran, their latency percentiles, the difference to a baseline, a step's."""

from __future__ import annotations


def attacks(report: dict, *, tracing: bool, target: str = "envoy") -> dict[tuple, dict]:
    """(mode, kind, rate) -> attack entry, for fixed-rate attacks that ran."""
    out = {}
    for run in report.get("overhead", {}).get("runs", []):
        if run["tracing"] != tracing:
            continue
        for a in run["attacks"]:
            if a.get("target") == target and not a.get("saturation") and "skipped" not in a:
                out[(run["mode"], a["kind"], a["rate"])] = a
    return out


def latency(a: dict | None, p: str) -> float | None:
    """Its latency percentile ``p`` ("p50"), ms."""
    return None if not a or not a.get("latency_ms") else a["latency_ms"].get(p)


def delta(a: dict | None, base: dict | None, p: str) -> float | None:
    """Its percentile ``p`` minus the baseline's, ms."""
    x, y = latency(a, p), latency(base, p)
    return None if x is None or y is None else round(x - y, 3)


def step(a: dict | None, name: str, p: str) -> float | None:
    """Step ``name``'s percentile ``p`` (a span's: "decision", "roundtrip", "gateway"), ms."""
    s = (a or {}).get("steps") or {}
    return (s.get(name) or {}).get(p)
