"""The one scheduler: when and how each check runs, from what it declares (its needs, the resources it uses and who
takes its rule on, :mod:`eppkit.conformance.registry`) and nothing else of it.

- A check runs after the checks it needs, and not at all when one of them failed (or was itself not run for that
  reason); one that audits runs after every check of ordinary traffic, one that may take the subject down after
  every other. Otherwise in the order given (the registry's: the report's).
- A rule the subject does not take on (``declared``) is n/a, unrun; the soak is left out with ``--quick`` and judged
  once in a version matrix.
- A check runs once per client protocol (HTTP/1.1, h2c), each in a thread of its own at once where the subject
  serves streams at once (its requests wait on the subject, not on each other), one after the other if it is timed;
  once in all if it uses one run.
- A check on a testbed of its own starts, where the subject serves streams at once, as soon as what it needs is
  judged, in a thread of its own (two at a time) beside the checks after it; a timed check waits for those first.
- A check's failure carries what Envoy and the EPP logged while it ran (a check beside the others gathers its own).
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generic

from eppkit.conformance.harness import Harness
from eppkit.conformance.registry import AUDIT, MAY_TAKE_DOWN, Check
from eppkit.conformance.results import FAIL, NOT_APPLICABLE, NOT_RUN, PASS, Result, evidence_of
from eppkit.conformance.subject import S
from eppkit.conformance.witness import NotWitnessed
from eppkit.observability.client import HTTP1

BESIDE_AT_ONCE = 2  # checks on testbeds of their own running at once, beside the others (2 cores)


def in_order(checks: list[Check]) -> list[Check]:
    """``checks`` in the order they run: as given (what a check needs is declared before it), but a check that audits
    after every check of ordinary traffic and one that may take the subject down after every other. ValueError for a
    check that would run before what it needs (an ordinary check that needs one that audits)."""
    def rank(check: Check) -> int:
        return 2 if MAY_TAKE_DOWN in check.uses else 1 if AUDIT in check.uses else 0

    ordered = sorted(checks, key=rank)
    place = {c.name: i for i, c in enumerate(ordered)}
    for i, c in enumerate(ordered):
        late = [n for n in c.needs if place.get(n, -1) > i]
        if late:
            raise ValueError(f"check {c.name!r} needs {', '.join(late)}, which runs after it (what it uses)")
    return ordered


def run_check(check: Check, harness: Harness, results: dict[str, Result]) -> Result:
    """``check`` against the harness's subject now, once per client protocol (HTTP/1.1, h2c) unless it uses one run;
    n/a when the subject does not declare its rule; not run when a check it needs failed (or was not run for that
    reason), or when the run leaves the soak out. A check on a testbed of its own gathers its failure's logs itself
    (Harness.mark): the checks after it begin their own while it runs."""
    why = check.not_declared(harness.target)
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
    if not check.beside:  # its logs from here on are its own (a check beside the others marks its own)
        harness.begin_check()
    protocols = harness.protocols if check.per_protocol else (HTTP1,)
    # Each protocol's run in a thread of its own, at once, where the subject serves streams at once: a check's
    # requests wait on the subject, not on each other (a hung request costs its timeout once, not once per protocol).
    at_once = len(protocols) if harness.concurrent and not check.timed else 1
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        runs = list(zip(protocols, pool.map(lambda p: _run_once(check, harness.on(p)), protocols)))
    result = combine(runs) if len(runs) > 1 else runs[0][1]
    if result.status == FAIL and not check.beside:
        result.evidence += harness.log_evidence()
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _run_once(check: Check, harness: Harness) -> Result:
    try:
        return check.run(harness)
    except NotWitnessed as exc:  # its requests failed for another cause: no evidence either way
        return Result(NOT_RUN, str(exc), [evidence_of(exc.sent.hop)])
    except Exception as exc:  # a check's own error is its failure, with what happened, not the suite's end
        return Result(FAIL, f"the check could not complete: {type(exc).__name__}: {exc}",
                      [line for line in traceback.format_exc().splitlines()[-6:]])


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


class Scheduler(Generic[S]):
    """Runs checks against ``harness``'s subject, into ``results`` (check id -> Result; what earlier runs judged,
    for a check's needs), telling ``on_result`` each one as it is judged."""

    def __init__(self, harness: Harness[S], results: dict[str, Result] | None = None, *,
                 on_result: Callable[[Check, Result], None] | None = None):
        self.harness = harness
        self.results: dict[str, Result] = results if results is not None else {}
        self.on_result = on_result

    def judge(self, check: Check) -> Result:
        """One check now, in this thread (pytest's test of it): by its needs as judged so far, its declaration, the
        soak's settings and its protocols, as :meth:`run` would; a check on a testbed of its own runs here too."""
        self.results[check.name] = result = run_check(check, self.harness, self.results)
        if self.on_result is not None:
            self.on_result(check, result)
        return result

    def run(self, checks: list[Check]) -> dict[str, Result]:
        """Every one of ``checks`` (:func:`in_order`), each check on a testbed of its own beside the others where the
        subject serves streams at once; the results."""
        harness, ordered = self.harness, in_order(checks)
        beside: dict[str, tuple[Check, Future]] = {}  # the checks running on testbeds of their own
        # A check on a testbed of its own starts as soon as what it needs is judged (its testbed and its load overlap
        # the rest), not when the list reaches it: the routing checks are last in the list and the slowest.
        waiting = [c for c in ordered if c.beside and harness.concurrent and not c.not_declared(harness.target)]
        pool = ThreadPoolExecutor(max_workers=BESIDE_AT_ONCE, thread_name_prefix="eppkit-beside")

        def start_ready() -> None:
            for c in [c for c in waiting if all(n in self.results for n in c.needs)]:
                waiting.remove(c)
                beside[c.name] = (c, pool.submit(run_check, c, harness, self.results))

        def settle() -> None:  # the checks running beside: their results, before a timed check or at the end
            for name, (c, future) in list(beside.items()):
                self.results[name] = future.result()
                del beside[name]
                if self.on_result is not None:
                    self.on_result(c, self.results[name])

        try:
            for check in ordered:
                start_ready()
                if check.name in beside:
                    continue
                if check.timed:
                    settle()
                self.judge(check)
            settle()
        finally:
            pool.shutdown(wait=True)  # a check beside the others still running (the suite failed): its bounded end
        return self.results
