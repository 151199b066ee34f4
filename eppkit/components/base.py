"""What a process and a container of the testbed have in common: a log file, readiness,
``with``-scoping, and a registry of the live ones so nothing outlives the kit.

:class:`eppkit.components.process.ManagedProcess` and :class:`eppkit.components.container.ManagedContainer`
build on :class:`Component`; each keeps its own :class:`LiveSet`, stopped at exit.
"""

from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path
from typing import Callable, Generic, TypeVar

from eppkit.components.readiness import ReadinessTimeout, WaitStrategy, wait_until_ready

C = TypeVar("C", bound="Component")


class Component:
    name: str
    log_path: Path

    def start(self: C) -> C:
        raise NotImplementedError

    def stop(self, grace_s: float = 5.0) -> int | None:
        raise NotImplementedError

    def wait_ready(self: C, strategy: WaitStrategy, hint: str = "") -> C:
        try:
            wait_until_ready(self, strategy, hint)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self: C) -> C:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def read_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.read_log().splitlines()[-lines:])


def start_whole(whole, what: str) -> None:
    """``whole._start()`` of something made of components (a testbed, a control plane); if it fails,
    ``whole.stop()`` and the error. A component that did not get ready tells its own story (ReadinessTimeout:
    which, its log's last lines, a hint); for any other failure the last lines of the parts that died go to
    stderr (not every part's start-up log)."""
    try:
        whole._start()
    except ReadinessTimeout:
        whole.stop()
        raise
    except BaseException:
        tails = "\n".join(f"=== {name} ({proc.log_path}) ===\n{proc.log_tail(20)}"
                          for name, proc in whole.processes().items() if not proc.is_running())
        whole.stop()
        if tails:
            print(f"\n--- {what} failed to start; logs in {whole.run_dir} ---\n{tails}", file=sys.stderr, flush=True)
        raise


class LiveSet(Generic[C]):
    """The started, not yet stopped components of one kind; stops them all at exit."""

    def __init__(self, grace_s: float):
        self._items: set[C] = set()
        self._lock = threading.Lock()
        self._grace_s = grace_s
        atexit.register(self.stop_all)

    def add(self, item: C) -> None:
        with self._lock:
            self._items.add(item)

    def discard(self, item: C) -> None:
        with self._lock:
            self._items.discard(item)

    def snapshot(self, keep: Callable[[C], bool] = lambda _: True) -> list[C]:
        with self._lock:
            return [item for item in self._items if keep(item)]

    def stop_all(self) -> None:
        for item in self.snapshot():
            item.stop(grace_s=self._grace_s)
