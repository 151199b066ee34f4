"""The floor: the plugin's testbed without its filters, started once per verdict beside the plugin's, and the rule a
figure measured through the plugin is held to against the same figure on the floor.

Envoy has no per-filter timing (envoyproxy/envoy#4547), so a filter's effect on a stream is a difference: the same
requests, interleaved, through both testbeds on the same machine at the same time, their medians compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness

VARIANT = "floor"  # the harness's name for the floor's testbed (kept up beside the plugin's for the whole verdict)
MIN_MS, SHARE = 5.0, 0.10  # a figure passes within max(5 ms, 10 %) of the floor's
RULE = f"a figure passes within max({MIN_MS:g} ms, {SHARE:.0%}) of the floor's (medians of the same requests)"


def bed(h: PluginHarness):
    """The floor's testbed (started on first use, then the same one for every check)."""
    return h.bed(VARIANT, topology=h.target.topology(floor=True))


def tolerance_ms(floor_ms: float) -> float:
    """How far a figure may be from the floor's: 5 ms, or 10 % of the floor's when that is more."""
    return max(MIN_MS, SHARE * abs(floor_ms))


def within(value_ms: float, floor_ms: float, *, later_only: bool = False) -> bool:
    """The rule: ``value_ms`` is within :func:`tolerance_ms` of ``floor_ms``, either way (gaps that shrink are a
    stream's pace changed too: a buffered stream's tokens arrive 0 ms apart); with ``later_only`` only a figure
    above the floor's counts (no filter makes a first token come sooner: that is the machine's noise)."""
    over = value_ms - floor_ms if later_only else abs(value_ms - floor_ms)
    return over <= tolerance_ms(floor_ms)


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def compared(what: str, value_ms: float, floor_ms: float, *, later_only: bool = False) -> tuple[str, str | None]:
    """One figure against the floor's: the line for the evidence, and the problem (None when within the rule)."""
    line = (f"{what}: {value_ms:.1f} ms through the plugin, {floor_ms:.1f} ms on the floor "
            f"(allowed {'+' if later_only else '±'}{tolerance_ms(floor_ms):.1f} ms)")
    return line, None if within(value_ms, floor_ms, later_only=later_only) else line
