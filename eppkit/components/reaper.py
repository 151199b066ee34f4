"""A watchdog per process and runtime: what this process started outlives it in no way, even after a SIGKILL.

``watch(module)`` starts, once per process, ``python -m eppkit.components.reaper <module> <session>``: it holds the
read end of a pipe whose write end only this process has. When this process ends in any way the pipe closes, and
the watchdog calls ``<module>.remove_session(<session>)`` (the docker runtime's containers:
:mod:`eppkit.components.container`; the kubernetes runtime's namespaces: :mod:`eppkit.cluster.pod`, on the cluster
its environment names: one watchdog per environment asked for).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_watching: dict[tuple, subprocess.Popen] = {}  # (module, env) -> its watchdog


def watch(module: str, session: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The watchdog of ``module``'s leftovers of ``session`` (``env``: what it needs besides this process's
    environment, e.g. which cluster), started unless it runs."""
    key = (module, tuple(sorted((env or {}).items())))
    running = _watching.get(key)
    if running is not None and running.poll() is None:
        return running
    _watching[key] = subprocess.Popen(
        [sys.executable, "-m", "eppkit.components.reaper", module, session],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})},
        # Its own session: Ctrl-C in the terminal must not take the watchdog down with us.
        start_new_session=True, cwd=str(Path(__file__).resolve().parent.parent.parent),
    )
    return _watching[key]


def watchdogs() -> list[subprocess.Popen]:
    """This process's watchdogs (they outlive it by design: the leak check spares them)."""
    return [p for p in _watching.values() if p.poll() is None]


def _main(module: str, session: str) -> int:
    """Wait for the owner's end (EOF on stdin), then remove what the session left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    remove_session = importlib.import_module(module).remove_session
    for _ in range(3):  # the engine may be briefly busy with the owner's own stops
        try:
            remove_session(session)
            return 0
        except Exception:  # noqa: BLE001 - a watchdog has no one to tell; it tries again
            time.sleep(1)
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m eppkit.components.reaper <module> <session>", file=sys.stderr)
        sys.exit(2)
    sys.exit(_main(sys.argv[1], sys.argv[2]))
