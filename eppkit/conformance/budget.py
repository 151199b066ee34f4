"""The budgets a verdict holds times to: an EPP's (:class:`Budget`: how long it may take to decide and to hand the body
back, ``eppkit conformance --budget``) and a plugin's (:class:`CostBudget`: the time it may add to a request,
``eppkit conformance --plugin --budget``). The harness carries the run's; latency-budget and cost-within-budget
judge by it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """How long the EPP may take, at a percentile of the suite's served requests (ms)."""

    decision_ms: float = 50.0
    release_ms: float = 50.0
    percentile: int = 90

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """``decision=50ms,release=80ms,p=99`` (any subset; ``ms`` optional); ValueError naming what is wrong."""
        return cls(**_pairs(text, {"decision": "decision_ms", "release": "release_ms", "p": "percentile"},
                            "give decision=<ms>, release=<ms> and p=<50-100>, e.g. decision=50ms,release=50ms,p=90"))

    def describe(self) -> str:
        return f"p{self.percentile} decision ≤ {self.decision_ms:g} ms, release ≤ {self.release_ms:g} ms"


@dataclass(frozen=True)
class CostBudget:
    """A plugin's budget (``eppkit conformance --plugin --budget``): the time it may add to a request, Envoy's own
    time on it less the backend's, through the plugin against the floor, at p50 and p99 (ms; or 10 % of the floor's
    figure when that is more). The defaults, on a 2-core VM: the gallery's no-op Lua filter adds 0.1-0.3 ms at p50
    and under 2 ms at p99 (the machine's own noise at p99 is a few ms); one that burns 3 ms of CPU a request is
    over it at p50."""

    p50_ms: float = 1.0
    # None: p99 reported, not judged (the default: a p99 of 40-80 requests is their slowest one, and on a busy
    # machine one request in forty waits for a core — 23 ms against the floor's 1.7 ms, the no-op filter in CI's load)
    p99_ms: float | None = None
    share: float = 0.10

    @classmethod
    def parse(cls, text: str) -> "CostBudget":
        """``p50=1ms,p99=5ms`` (either; ``ms`` optional); ValueError naming what is wrong."""
        return cls(**_pairs(text, {"p50": "p50_ms", "p99": "p99_ms"},
                            "with --plugin give p50=<ms> and p99=<ms>: the time the plugin may add, e.g. "
                            "p50=1ms,p99=5ms"))

    def allowed_ms(self, at: int, floor_ms: float) -> float | None:
        """What the plugin may add at percentile ``at`` (50 or 99) to the floor's ``floor_ms`` (None: not judged)."""
        limit = self.p50_ms if at == 50 else self.p99_ms
        return None if limit is None else max(limit, self.share * abs(floor_ms))

    def describe(self) -> str:
        p99 = f"p99 ≤ {self.p99_ms:g} ms" if self.p99_ms is not None else "p99 reported, not judged"
        return (f"the plugin may add p50 ≤ {self.p50_ms:g} ms, {p99} (or {self.share:.0%} of the floor's) to Envoy's "
                "time on a request")


def _pairs(text: str, keys: dict[str, str], hint: str) -> dict:
    """``key=value,...`` of a --budget (any subset of ``keys``: flag key -> field; ``ms`` optional; ``p`` a
    percentile 50-100, an int); ValueError naming the part that is wrong and ``hint``."""
    values: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip().removesuffix("ms")
        try:
            if not sep or key not in keys:
                raise ValueError
            number = float(value)
            if number <= 0 or (key == "p" and not (50 <= number <= 100)):
                raise ValueError
        except ValueError:
            raise ValueError(f"--budget {part!r}: {hint}") from None
        values[keys[key]] = int(number) if key == "p" else number
    return values
