"""The leak check: at the end of a session, anything the kit started and nobody stopped fails the run.

Processes are found three ways: the registries of managed processes and containers, and, for what no
registry knows (grandchildren that left their group, processes of a CLI run as a subprocess), the
session's tag in /proc (:data:`eppkit.core.procfs.SESSION_TAG`). Whatever is found is stopped, killed
or removed, and reported as ``LEAK: ...``.

Under pytest-xdist every worker checks its own session this way and hands its findings to the
controller (``workeroutput``), which reports them and fails the run; the controller then looks for
what any worker left that its own check could not see (a worker that crashed): processes and
containers carrying a worker's tag of this run (:mod:`eppkit.pytest_plugin.parallel`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable

import pytest

from eppkit.components import reaper
from eppkit.core import procfs
from eppkit.core.settings import settings
from eppkit.pytest_plugin.parallel import LOOKS, REPORTED, WORKER_LEAKS, WORKER_LOOK, is_controller, worker_id
from eppkit.pytest_plugin.state import SESSION_TAG

GRACE_S = 2.0  # for processes still exiting after their group was killed
CONTROLLER_GRACE_S = 10.0  # for a finished worker's watchdogs (eppkit.components.reaper), which removes what its worker left, then exits


def tagged_processes(tag: str | None = None, *, workers: bool = False, grace_s: float = 0.0) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying this session's tag (``workers``: a worker's tag
    of this run), this process and its docker watchdog excepted; waits up to ``grace_s`` for them to go."""
    tag = tag or settings().test_session or ""
    spared = {os.getpid()}
    spared.update(p.pid for p in reaper.watchdogs())  # they outlive this process by design
    deadline = time.monotonic() + grace_s
    found = procfs.tagged(tag, workers=workers, spared=spared)
    # The grace is for processes exiting: what was found is watched until it is gone, by its pid. (Scanning every
    # environment again would let one scan that misses a process end the wait and report nothing.)
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = [(pid, cmd) for pid, cmd in found if procfs.alive(pid)]
    return found


def _kill(found: list[tuple[int, str]]) -> None:
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def own_leaks() -> tuple[list[str], str]:
    """What this session (or this worker) left: stopped, killed or removed now; one line each kind. And what its
    look for its tag saw (``looked for <tag>: N found``), which a worker hands to the controller.

    Each part runs whatever the others did: one that raises is a line of its own (and fails the run), never the
    loss of what the others found."""
    lines: list[str] = []
    looked = ["not done"]

    def part(what: str, look) -> None:
        try:
            look()
        except Exception as exc:  # whatever it is, the run must hear of it
            lines.append(f"the leak check's look at {what} failed ({type(exc).__name__}: {exc}); what it would have "
                         "found is unknown")

    def registry() -> None:
        if "eppkit.components.process" not in sys.modules:
            return
        from eppkit.components.process import live_processes

        leaked = live_processes()
        if leaked:
            lines.append("eppkit processes still running at session end: "
                         + ", ".join(f"{p.name}(pid {p.pid})" for p in leaked))
            for p in leaked:
                p.stop(grace_s=1)
        from eppkit.components import zygote

        zygote.stop()  # it kills any child of its own still running: the registry above has named them

    def tagged() -> None:  # whatever no registry knows: grandchildren that left their group, a CLI's processes
        tag = settings().test_session or ""
        orphans = tagged_processes(tag, grace_s=GRACE_S)
        looked[0] = f"looked for {SESSION_TAG}={tag} at {time.strftime('%H:%M:%S')}: {len(orphans)} found"
        if orphans:
            lines.append("processes of this session still running at its end (now killed): "
                         + "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in orphans))
            _kill(orphans)

    def runtime(provider) -> Callable[[], None]:
        """The look at one runtime's components (its containers, its pods), if any ran in this session."""
        def look() -> None:
            line = provider.leftovers()
            if line:
                lines.append(line)
        return look

    part("the kit's registries of processes", registry)
    part("this session's tagged processes", tagged)
    from eppkit import runtimes

    for provider in runtimes.all_runtimes():  # each says what of its own ran here and is still there
        part(f"this session's components of the {provider.name} runtime", runtime(provider))
    return lines, looked[0]


def workers_leaks(config: pytest.Config) -> list[str]:
    """The controller's look, once every worker is gone: what workers reported, and what they left unseen."""
    tag = settings().test_session or ""
    lines = list(config.stash.get(REPORTED, []))
    orphans = tagged_processes(tag, workers=True, grace_s=CONTROLLER_GRACE_S)
    if orphans:
        # What the orphans' workers' own looks saw: how a worker whose check missed one looked (or that it never
        # reported one: a worker that died).
        looks = config.stash.get(LOOKS, {})
        workers = sorted({(procfs.tag_of(pid) or "?").rsplit("/", 1)[-1] for pid, _ in orphans})
        seen = "; ".join(f"{w}: {looks.get(w, 'no report of its own look')}" for w in workers)
        lines.append("processes of this run's workers still running at its end (now killed): "
                     + "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in orphans)
                     + f" (the workers' own looks: {seen})")
        _kill(orphans)
    from eppkit import runtimes

    for provider in runtimes.all_runtimes():  # what workers left of each runtime's components (a container)
        line = provider.workers_leftovers(tag)
        if line:
            lines.append(line)
    return lines


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the session fixtures (and xdist's of its workers)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    looked = ""
    if is_controller(config):
        lines = workers_leaks(config)
    else:
        lines, looked = own_leaks()
    worker = worker_id(config)
    if worker is not None:  # the controller reports it: a remote worker's stderr reaches no terminal
        config.workeroutput[WORKER_LEAKS] = [f"[{worker}] {line}" for line in lines]
        config.workeroutput[WORKER_LOOK] = looked
    else:
        for line in lines:
            sys.stderr.write(f"\nLEAK: {line}\n")
    if lines:
        session.exitstatus = 1
