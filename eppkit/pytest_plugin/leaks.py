"""The leak check: at the end of a session, anything the kit started and nobody stopped fails the run.

Processes are found three ways: the registries of managed processes and containers, and, for what no
registry knows (grandchildren that left their group, processes of a CLI run as a subprocess), the
session's tag in /proc (:data:`eppkit.pytest_plugin.state.SESSION_TAG`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from eppkit.pytest_plugin.state import SESSION_TAG


def tagged_processes(tag: str | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying this session's tag, this one excepted."""
    tag = tag or os.environ.get(SESSION_TAG, "")
    if not tag or not os.path.isdir("/proc"):
        return []
    needle = f"{SESSION_TAG}={tag}".encode()
    spared = {os.getpid()}
    reaper = getattr(sys.modules.get("eppkit.components.container"), "_reaper", None)
    if reaper is not None:  # the docker watchdog: it must outlive this process, by design
        spared.add(reaper.pid)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append((int(entry), cmdline))
    return found


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the session fixtures
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "eppkit.components.process" in sys.modules:
        from eppkit.components.process import live_processes

        leaked = live_processes()
        if leaked:
            names = ", ".join(f"{p.name}(pid {p.pid})" for p in leaked)
            sys.stderr.write(f"\nLEAK: eppkit processes still running at session end: {names}\n")
            for p in leaked:
                p.stop(grace_s=1)
            session.exitstatus = 1
    # Whatever no registry knows: grandchildren that left their group, processes of a CLI subprocess.
    # A moment's grace first for processes that are still exiting after their group was killed.
    deadline = time.monotonic() + 2.0
    orphans = tagged_processes()
    while orphans and time.monotonic() < deadline:
        time.sleep(0.1)
        orphans = tagged_processes()
    if orphans:
        listing = "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in orphans)
        sys.stderr.write(f"\nLEAK: processes of this session still running at its end (now killed): {listing}\n")
        for pid, _ in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        session.exitstatus = 1
    if "eppkit.components.container" in sys.modules:  # the docker runtime ran: the same check for containers
        from eppkit.components import container as containers

        leaked_c = containers.live_containers()
        for c in leaked_c:
            c.stop(grace_s=1)
        try:
            strays = containers.remove_session()
        except Exception:  # no engine answers (the docker tests skipped): nothing can be there
            strays = []
        if leaked_c or strays:
            names = ", ".join([c.name for c in leaked_c] + strays)
            sys.stderr.write(f"\nLEAK: eppkit containers still there at session end (now removed): {names}\n")
            session.exitstatus = 1
