"""No module errors: a dynamic module says what went wrong through Envoy's log. The SDK's log call at error level (Go:
``handle.Log(shared.LogLevelError, ...)``) is a line at ``[error][dynamic_modules]``, and so is a panic a newer Go SDK
recovers at the ABI boundary (``<hook>: recovered panic at the ABI boundary: <value>``, the hook then returning a
fail-closed value in place of its own). Envoy counts none of it: a module has no ``errors`` counter, as a Lua filter
has (no-script-errors), so its lines in Envoy's log are the evidence. Lines the floor's Envoy logged too are not the
plugin's (a mode's own module, as dynmod-callout's, runs in both).

A check of its own, not no-script-errors widened: the evidence differs (a log line, not a counter), so does what the
check applies to (a dynamic module in the chain, not a Lua filter), and a plugin with both has each judged by its
own rule, the report naming which one erred."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.plugin_checks.script_errors import ROBUSTNESS, envoy_log_lines, ordinary_requests
from eppkit.conformance.registry import AUDIT, check
from eppkit.conformance.results import MUST, Result, evidence_of, judged
from eppkit.gateway import go_modules

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness

# Envoy's levels for a module's log lines that say something failed.
ERROR_TAGS = ("][error][dynamic_modules]", "][critical][dynamic_modules]")
_SOURCE = re.compile(r"^\[\w+\]\[dynamic_modules\] (\[[^\]]*\] )?")


def _mode_loads_module(mode: str) -> bool:
    """Whether the mode's own Envoy template loads a dynamic module (dynmod-callout's)."""
    from eppkit import modes
    from eppkit.core.paths import ENVOY_TEMPLATES

    try:
        return go_modules.MODULE_KEY in (ENVOY_TEMPLATES / modes.get(mode).template).read_text()
    except (KeyError, ValueError, OSError):
        return False


def _declared(target) -> str | None:
    from eppkit.gateway.user_filters import is_dynamic_module

    if any(is_dynamic_module(f) for f in target.filters) or _mode_loads_module(target.mode):
        return None
    return "no dynamic module in the chain (a Lua filter's errors are no-script-errors')"


def _said(line: str) -> str:
    """A log line from its level on (``[error][dynamic_modules] [<source>] <message>``): no timestamp nor thread."""
    return line[min(line.find(tag) for tag in ERROR_TAGS if tag in line) + 1:].strip()


def _message(line: str) -> str:
    """What the module said: the line after its level and Envoy's source location (when Envoy gave one)."""
    return _SOURCE.sub("", _said(line))


def error_lines(bed) -> list[str]:
    """Envoy's lines at error or critical level from its dynamic_modules logger, over the testbed's whole life."""
    return envoy_log_lines(bed, lambda line: any(tag in line for tag in ERROR_TAGS))


def plugin_error_lines(bed, floor_bed) -> list[str]:
    """:func:`error_lines` of the plugin's testbed that its floor's Envoy did not log too."""
    floors = {_message(line) for line in error_lines(floor_bed)}
    return [line for line in error_lines(bed) if _message(line) not in floors]


@check("no-module-errors", "the plugin's dynamic modules log no error", category=ROBUSTNESS, level=MUST,
       source="Envoy dynamic modules (abi.h: envoy_dynamic_module_callback_log; the Go SDK's Log and panic barrier)",
       uses=(AUDIT,), declared=_declared)
def no_module_errors(h: PluginHarness) -> Result:
    """A chat, a streamed chat, a GET and a body in paced pieces through the plugin, each served: Envoy logs no line
    at ``[error]`` or ``[critical]`` from a dynamic module for them, nor for any request the verdict sent before
    them. A failure quotes Envoy's line."""
    bed, floor_bed = h.bed(), floor.bed(h)
    before = plugin_error_lines(bed, floor_bed)
    sents = ordinary_requests(h, bed)
    after = plugin_error_lines(bed, floor_bed)
    new = after[len(before):]
    evidence = [f"Envoy logged: {line}" for line in after[-8:]] or [
        f"Envoy logged no [error] nor [critical] line from a dynamic module over {len(bed.hops())} requests"]
    evidence.append(evidence_of(sents[0].hop))
    problems = []
    if new:
        problems.append(f"{len(new)} error lines in {len(sents)} served requests")
    if before:
        problems.append(f"{len(before)} error lines over the verdict's earlier requests")
    return judged(problems, evidence,
                  failing="the plugin's dynamic module logged errors through Envoy"
                          + (f" (Envoy: {_said(after[0])})" if after else ""),
                  passing=f"no error from a dynamic module in Envoy's log over {len(bed.hops())} requests",
                  fix="Handle what the module logs as the request's outcome (refuse it in OpenAI-style JSON, or serve "
                      "it); log at error level only what an operator must act on")
