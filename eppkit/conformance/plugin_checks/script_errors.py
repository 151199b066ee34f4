"""No script errors: a Lua runtime error is not a 500. Envoy logs ``script log: <error>`` at ``[error][lua]``, counts
it in the filter's ``errors`` counter and lets the request through as if the filter were not there (it fails open:
envoyproxy/envoy#14980), so a gate that errors lets every request it errors on through. The kit gives each of your
Lua filters a stat_prefix of its own (eppkit.gateway.user_filters), so its counter,
``http.ingress.lua.<prefix>.errors``, is the plugin's alone: a counter the floor has too is not the plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import AUDIT, check
from eppkit.conformance.results import MUST, NOT_RUN, Result, evidence_of, judged

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness

ROBUSTNESS = "robustness"
LUA_STATS = "http.ingress.lua."
SCRIPT_LOG = "script log:"
# Requests of every shape the filter's paths see: a body, a stream, no body, a body in pieces.
REQUESTS = ({}, {"stream": True, "max_tokens": 4}, {"method": "GET"},
            {"raw_body": None, "pieces": 4, "pause_s": 0.005})


def _declared(target) -> str | None:
    if not target.has_lua():
        return ("no Lua filter among the plugin's filters (a dynamic module's errors are no-module-errors'; another "
                "HTTP filter's are not judged)")
    return None


def ordinary_requests(h: PluginHarness, bed) -> list:
    """:data:`REQUESTS` through ``bed``, each served (else the check is not run, with the cause): their Sents."""
    model = bed.backends[0].model
    sents = []
    for kwargs in REQUESTS:
        if "raw_body" in kwargs:
            kwargs = {**kwargs, "raw_body": f'{{"model": "{model}", "max_tokens": 1, "messages": [{{"role": "user", '
                                            f'"content": "{"hello " * 400}"}}]}}'.encode()}
        sents.append(h.must_serve(h.send(bed, **kwargs), "a request through the plugin"))
    return sents


def lua_errors(h: PluginHarness, bed, floor_bed) -> dict[str, int]:
    """The plugin's own Lua ``errors`` counters on its testbed (those the floor's testbed has too are the mode's)."""
    theirs = h.stats(floor_bed, LUA_STATS)
    return {k: v for k, v in h.stats(bed, LUA_STATS).items() if k.endswith(".errors") and k not in theirs}


def envoy_log_lines(bed, keep) -> list[str]:
    """The lines of the testbed's Envoy log, over its whole life, that ``keep`` (a predicate) keeps, each cut at 400
    characters."""
    proc = bed.processes().get("envoy")
    text = proc.read_log() if proc is not None else ""
    return [line[:400] for line in text.splitlines() if keep(line)]


def script_error_lines(bed, lines: int = 8) -> list[str]:
    """Envoy's ``[error][lua] ... script log:`` lines over the testbed's whole life (logErr writes the same words:
    the counter, not these lines, says whether the script failed)."""
    return envoy_log_lines(bed, lambda line: "][lua]" in line and SCRIPT_LOG in line)[-lines:]


def quoted(lines: list[str]) -> str | None:
    """Envoy's words of the last of ``lines`` (``script log: <error>``), or None."""
    return f"{SCRIPT_LOG} {lines[-1].split(SCRIPT_LOG, 1)[1].strip()}" if lines else None


@check("no-script-errors", "the plugin's Lua script raises no error", category=ROBUSTNESS, level=MUST,
       source="Envoy Lua filter (lua_filter.rst: statistics; a script error fails open)",
       declared=_declared, uses=(AUDIT,))
def no_script_errors(h: PluginHarness) -> Result:
    """A chat, a streamed chat, a GET and a body in paced pieces through the plugin, each served: its Lua filters'
    ``errors`` counters do not move, and across every request the verdict sent it they stand at 0. A failure quotes
    Envoy's ``script log:`` line (the error and its line in the script)."""
    bed, floor_bed = h.bed(), floor.bed(h)
    before = lua_errors(h, bed, floor_bed)
    if not before:
        return Result(NOT_RUN, f"Envoy shows no errors counter of the plugin's Lua filter under {LUA_STATS} (its "
                               "stat_prefix): nothing to judge by")
    sents = ordinary_requests(h, bed)
    after = lua_errors(h, bed, floor_bed)
    moved = {k: after.get(k, 0) - v for k, v in before.items() if after.get(k, 0) != v}
    total = sum(after.values())
    evidence = [f"Envoy's counters after {len(sents)} requests: "
                + ", ".join(f"{k} {before[k]} -> {after.get(k, 0)}" for k in before),
                (f"over every request this verdict sent the plugin ({len(bed.hops())} as Envoy logged them): "
                 f"{total} script errors")]
    logged = script_error_lines(bed)
    evidence += [f"Envoy logged: {line}" for line in logged] or ["Envoy logged no script log: line"]
    evidence.append(evidence_of(sents[0].hop))
    problems = []
    if moved:
        problems.append(f"{sum(moved.values())} script errors in {len(sents)} served requests")
    if total and not moved:
        problems.append(f"{total} script errors over the verdict's earlier requests")
    first = quoted(logged[:1])
    return judged(problems, evidence,
                  failing="the Lua script raised errors, and Envoy let each such request through as if the filter "
                          "were not there" + (f" (Envoy: {first})" if first else ""),
                  passing=f"no script error in {len(bed.hops())} requests (errors counter 0)",
                  fix="Guard what may be nil (a missing header's get() returns nil); a gate must refuse, not fail")
