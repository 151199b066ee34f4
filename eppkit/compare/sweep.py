"""The concurrency sweep: with ``--concurrency-sweep 1,4,16,32`` every run of a comparison (each mode, each body path
it takes, each floor) runs once per concurrency, in one comparison, each step in a testbed of its own and bounded as
any run is (``--requests``, ``--max-duration``, ``--request-timeout``). A step's results are under
``<run>@c<n>`` (``ext_proc@c16``, ``floor-ext_proc+buffered@c16``); a table (console, summary.md, report.html) and a
chart (report.html) set each run's TTFT, gateway and hold p50 against the concurrency. With a scenario whose
prompts come in sizes (``prompt-sizes``) the per-size table has a column per step: the long-prompt curve at each
concurrency."""

from __future__ import annotations

from eppkit.compare import promptsizes, tables

SEP = "@c"  # a step's key: the run's, then this, then its concurrency (the steps: eppkit.workload.concurrency_steps)


def key(run_key: str, concurrency: int | None) -> str:
    """The key of ``run_key`` (a mode's or a floor's) at one step of the sweep; itself outside a sweep (None)."""
    return run_key if concurrency is None else f"{run_key}{SEP}{concurrency}"


def split(run_key: str) -> tuple[str, int | None]:
    """(the run without its step, the step's concurrency or None)."""
    base, sep, step = run_key.rpartition(SEP)
    return (base, int(step)) if sep and step.isdigit() else (run_key, None)


def _measure(result: dict, name: str, where: str) -> float | None:
    """A run's p50 of one of :data:`promptsizes.MEASURES` (its ``steps``', or Envoy's record of the ``hop``)."""
    return ((result.get(where) or {}).get(name) or {}).get("p50")


def curves(block: dict) -> dict[str, list[dict]]:
    """Per run swept (its key without the step): one point per concurrency, ascending, with the p50 of each of
    :data:`promptsizes.MEASURES`; {} outside a sweep."""
    out: dict[str, list[dict]] = {}
    for run_key, result in block.get("modes", {}).items():
        base, concurrency = split(run_key)
        if concurrency is None or result.get("status") != "ok":
            continue
        point = {"concurrency": concurrency, "requests": (result.get("requests") or {}).get("ok")}
        point.update({name: _measure(result, name, where) for name, where in promptsizes.MEASURES})
        out.setdefault(base, []).append(point)
    return {base: sorted(points, key=lambda p: p["concurrency"]) for base, points in out.items()}


def table(block: dict) -> tables.Table | None:
    """Rows: the concurrencies; a column per run swept: "ttft / gateway / hold" p50 (ms). None outside a sweep."""
    found = curves(block)
    if not found:
        return None
    by_run = {base: {p["concurrency"]: p for p in points} for base, points in found.items()}
    levels = sorted({c for points in by_run.values() for c in points})
    rows = [[str(c)] + [promptsizes.cell(by_run[base].get(c)) for base in by_run] for c in levels]
    return tables.Table(
        "Per concurrency, p50 ms: TTFT / gateway / hold", ("in flight",) + tuple(by_run), rows,
        notes=["Each step a testbed of its own with the same requests, at most that many in flight. TTFT: the "
               "client's first token; gateway: Envoy's ingress start to its upstream request's start; hold: what "
               "Envoy waited between the end of the request and the upstream's start (the EPP hop)."])
