"""What a process and a container of the testbed have in common: a log file, readiness,
``with``-scoping, and a registry of the live ones so nothing outlives the kit.

:class:`eppkit.components.process.ManagedProcess`, :class:`eppkit.components.container.ManagedContainer` and
:class:`eppkit.cluster.pod.ManagedPod` build on :class:`Component` (the last two on :class:`FromImage`); each keeps
its own :class:`LiveSet`, stopped at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Generic, Sequence, TypeVar

from eppkit.components.readiness import ReadinessTimeout, WaitStrategy, wait_until_ready

C = TypeVar("C", bound="Component")


class Component:
    name: str
    log_path: Path
    learned_address: str | None = None  # the address its network gave it once ready (a Pod's), else None: as planned

    def refresh(self, folder: str | os.PathLike) -> None:
        """``folder``'s files were rewritten on this host: nothing to do for a component that reads them there (a Pod
        with a copy of its own brings that copy up to date)."""

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


class FromImage(Component):
    """A component run from an image (a container, a Pod): its program, its environment, the host paths it sees (each
    at the same path, so rendered configs need no rewriting) and its working folder, set before it starts."""

    def __init__(self, name: str, image: str, argv: Sequence[str], log_path: Path, *,
                 entrypoint: Sequence[str] | None = None, extra_labels: dict[str, str] | None = None):
        self.name = name
        self.image = image
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.entrypoint = list(entrypoint) if entrypoint is not None else None
        self.env: dict[str, str] = {}
        self.mounts: dict[str, str] = {}  # host path -> "ro" | "rw", mounted at the same path
        self.cwd: str | None = None  # the working directory inside (a mounted host path), as ManagedProcess.with_cwd
        self.extra_labels = dict(extra_labels or {})

    def with_env(self: F, **env: str) -> F:
        self.env.update({k: str(v) for k, v in env.items()})
        return self

    def with_cwd(self: F, cwd: str | os.PathLike) -> F:
        self.cwd = str(Path(cwd).resolve())
        return self

    def with_mount(self: F, path: str | os.PathLike, mode: str = "ro") -> F:
        """Mount a host path at the same absolute path inside (read-write wins over read-only)."""
        path = str(Path(path).resolve())
        if self.mounts.get(path) != "rw":
            self.mounts[path] = mode
        return self


F = TypeVar("F", bound=FromImage)


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
