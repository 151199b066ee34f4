"""What the tests of a verdict share: local testbeds on one Jaeger, each made by the verdict; sustained-load judged
on the suite's shared machine."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.testbed import new_run_dir


@contextmanager
def local_beds(jaeger_name: str) -> Iterator[tuple]:
    """(make, beds): ``make(topology)`` starts a local testbed on the shared Jaeger and keeps it in ``beds``, for
    whoever judges with it to stop."""
    beds: list = []
    with create_jaeger("local", new_run_dir(jaeger_name)) as jaeger:
        def make(topology):
            bed = create(topology, runtime="local", jaeger=jaeger)
            beds.append(bed)
            return bed.start()

        yield make, beds


# sustained-load on the suite's shared 2 cores: when the other workers slow the machine below the pace its 2,000
# requests in 45 s need (32-42 a second in one CI run), it says "not run", never a pass. It is judged again while it
# says so, up to SUSTAINED_TRIES times in all, SUSTAINED_PAUSE_S apart; "not run" every time stays not run (a test
# asserting a pass fails). A pass or a fail is final.
SUSTAINED_TRIES, SUSTAINED_PAUSE_S = 3, 20.0


def sustained_load(report: dict) -> dict:
    """The sustained-load check of a report."""
    return next(c for c in report["checks"] if c["id"] == "sustained-load")


def sustained_judged(judge: Callable[[], dict], first: dict | None = None) -> tuple[dict, dict]:
    """(report, its sustained-load check): ``first`` (a report already made) or ``judge()``'s, judged again by
    ``judge`` while the machine was too slow (see SUSTAINED_TRIES)."""
    report = first if first is not None else judge()
    for _ in range(SUSTAINED_TRIES - 1):
        if sustained_load(report)["status"] != "not run":
            break
        print(f"sustained-load not run: {sustained_load(report)['message']}; judged again in {SUSTAINED_PAUSE_S:g} s")
        time.sleep(SUSTAINED_PAUSE_S)
        report = judge()
    return report, sustained_load(report)
