"""The figures inference load tools report, from the kit's own samples: ITL, TPOT, output tokens per second,
and goodput at a latency objective (SLO).

The definitions are inference-perf's (kubernetes-sigs/inference-perf 0.7.0, ``reportgen/base.py``), so
the two can stand side by side (:mod:`eppkit.compare.loadtool`):

- **ITL** (inter-token latency): every gap between two consecutive tokens' arrivals at the client
  (``ClientResult.itl_ms``), pooled over a mode's successful streamed requests, so long answers weigh
  more; p50 / p90 / p99 and the mean.
- **TPOT** (time per output token): per request, (last token's arrival − first's) / (tokens − 1); its
  distribution over requests. With a steady decoder ITL mean and TPOT mean are the same number.
- **output tokens/s**: output tokens of the successful requests over the measured phase's wall time
  (``throughput.output_tokens_per_s``, computed with the other throughput figures).
- **goodput**: the share of the *sent* requests that succeeded and met every limit of the SLO —
  TTFT from the trace's ``first_token`` event, TPOT, e2e from the client's root span — and those good
  requests per second. inference-perf divides by its successful requests only; with no errors the two
  agree. A limit the scenario cannot measure (TTFT and TPOT of an answer that was not streamed) leaves
  goodput unmeasured, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eppkit.compare.tables import Table, fmt, pct
from eppkit.observability import steps as st

# What an SLO may limit, by key; TTFT and TPOT only where the answers are streamed.
SLO_KEYS = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end to end"}
STREAMED_ONLY = frozenset({"ttft", "tpot"})
# Baseline gates of these figures: latencies (higher is worse) and rates (lower is worse).
LATENCY_GATES = (("itl", "p50"), ("itl", "p90"), ("tpot", "p50"), ("tpot", "p90"))

_LIMIT = re.compile(r"^\s*(?P<key>[a-z0-9]+)\s*(=|<=|≤)\s*(?P<value>[0-9]*\.?[0-9]+)\s*(?P<unit>ms|s)?\s*$")


@dataclass(frozen=True)
class Slo:
    """Latency limits in ms, by key (SLO_KEYS); empty: no objective, no goodput."""

    limits: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Slo":
        """``ttft=200ms,tpot=20ms`` (units ms or s; a bare number is ms); ``none`` or "" for no objective."""
        if text.strip().lower() in ("", "none"):
            return cls()
        limits: dict[str, float] = {}
        for part in text.split(","):
            m = _LIMIT.match(part)
            if not m:
                raise ValueError(f"--slo: cannot read {part.strip()!r}: write KEY=VALUE[ms|s],..., e.g. ttft=0.5s,e2e=2000ms")
            key = m["key"]
            if key not in SLO_KEYS:
                raise ValueError(f"--slo: unknown limit {key!r}; choose from {', '.join(SLO_KEYS)}")
            if key in limits:
                raise ValueError(f"--slo: {key} given twice")
            limits[key] = float(m["value"]) * (1000.0 if m["unit"] == "s" else 1.0)
        return cls(tuple(limits.items()))

    @property
    def text(self) -> str:
        return ", ".join(f"{k} ≤ {v:g} ms" for k, v in self.limits) or "none"

    def as_dict(self) -> dict[str, float]:
        return dict(self.limits)


def value(sample: dict, key: str) -> float | None:
    """A sample's figure an SLO limits: TTFT and e2e from its trace (the client's own measurement when the
    trace was not read), TPOT from the client's token arrivals."""
    if key == "tpot":
        return sample.get("tpot_ms")
    steps = sample.get("steps") or {}
    return steps.get(key) if steps.get(key) is not None else sample.get(f"{key}_ms")


def _meets(sample: dict, key: str, limit: float) -> bool:
    found = value(sample, key)
    return found is not None and found <= limit


def goodput(samples: list[dict], slo: Slo, *, wall_s: float) -> dict | None:
    """Good requests (succeeded, every limit met) among those sent; None without an objective."""
    if not slo.limits:
        return None
    out: dict = {"slo": slo.as_dict(), "sent": len(samples)}
    ok = [s for s in samples if s.get("ok")]
    unmeasured = [k for k, _ in slo.limits if k in STREAMED_ONLY and ok and all(value(s, k) is None for s in ok)]
    if unmeasured or not samples:
        out.update(good=None, ratio=None, requests_per_s=None,
                   why=f"{', '.join(unmeasured)} not measured: the answers were not streamed" if unmeasured
                   else "no request was sent")
        return out
    good = sum(1 for s in ok if all(_meets(s, k, limit) for k, limit in slo.limits))
    out.update(good=good, ratio=round(good / len(samples), 4),
               requests_per_s=round(good / wall_s, 3) if wall_s > 0 else None,
               attainment={k: round(sum(1 for s in ok if _meets(s, k, limit)) / len(samples), 4)
                           for k, limit in slo.limits})
    return out


def summarize(samples: list[dict], *, wall_s: float, slo: Slo) -> dict:
    """A mode's load figures: ITL pooled over its successful requests, TPOT per request, goodput at ``slo``.

    Each sample as the workload records it (``ok``, ``itl_ms``, ``tpot_ms``, ``steps``, ``ttft_ms``, ``e2e_ms``).
    """
    ok = [s for s in samples if s.get("ok")]
    itl = [gap for s in ok for gap in (s.get("itl_ms") or [])]
    tpot = [s["tpot_ms"] for s in ok if s.get("tpot_ms") is not None]
    return {"itl": st.summarize(itl) if itl else None, "tpot": st.summarize(tpot) if tpot else None,
            "goodput": goodput(samples, slo, wall_s=wall_s)}


def gate_values(result: dict) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """What a baseline gates on, by metric name: (latencies in ms, higher is worse; rates, lower is worse).
    Goodput is named with its objective, so reports made with different objectives are not compared."""
    figures = result.get("load_metrics") or {}
    latencies = {f"{k}.{q}_ms": (figures.get(k) or {}).get(q) for k, q in LATENCY_GATES}
    rates = {"output_tokens_per_s": (result.get("throughput") or {}).get("output_tokens_per_s")}
    good = figures.get("goodput") or {}
    if good.get("ratio") is not None:
        rates[f"goodput[{Slo(tuple(good['slo'].items())).text}]"] = good["ratio"]
    return latencies, rates


# -- the report's table ------------------------------------------------------------------------------------

COLUMNS = ("mode", "ITL p50", "p90", "p99", "ITL mean", "TPOT p50", "p90", "out tok/s", "goodput", "good req/s")


def table(block: dict, slo_text: str) -> Table | None:
    """The scenario's load figures per mode, or None when no mode ran."""
    rows = []
    for mode, r in block.get("modes", {}).items():
        if r.get("status") != "ok" or "load_metrics" not in r:  # failed, or a report of an older eppkit
            continue
        lm = r.get("load_metrics") or {}
        itl, tpot, good = lm.get("itl") or {}, lm.get("tpot") or {}, lm.get("goodput") or {}
        rows.append([mode, fmt(itl.get("p50"), 2), fmt(itl.get("p90"), 2), fmt(itl.get("p99"), 2),
                     fmt(itl.get("mean"), 2), fmt(tpot.get("p50"), 2), fmt(tpot.get("p90"), 2),
                     fmt((r.get("throughput") or {}).get("output_tokens_per_s")), pct(good.get("ratio")),
                     fmt(good.get("requests_per_s"))])
    if not rows:
        return None
    notes = [f"Goodput: the share of sent requests that succeeded with {slo_text} (--slo)."]
    unmeasured = {((r.get("load_metrics") or {}).get("goodput") or {}).get("why") for r in block["modes"].values()}
    notes += [f"Goodput not measured: {why}." for why in sorted(w for w in unmeasured if w)]
    return Table("Load figures, as load tools report them (ms; ITL pooled over every token gap, TPOT per request)",
                 COLUMNS, rows, notes)
