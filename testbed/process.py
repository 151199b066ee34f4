"""A managed child process: started in a ``with``, logged to a file, always stopped.

Guarantees that nothing outlives the kit:
- every child runs in its own session (process group) so we can signal the whole group;
- on Linux each child also gets PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed parent
  (where no ``finally`` runs) takes its children with it;
- every started process is registered and stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

from testbed.readiness import WaitStrategy, wait_until_ready

_PR_SET_PDEATHSIG = 1
_live: set["ManagedProcess"] = set()
_live_lock = threading.Lock()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


class ManagedProcess:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path):
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env: dict[str, str] = {}
        self.cwd: str | None = None
        self._proc: subprocess.Popen | None = None
        self._log_file = None

    # -- fluent configuration -------------------------------------------------
    def with_env(self, **env: str) -> "ManagedProcess":
        self.env.update(env)
        return self

    def with_cwd(self, cwd: str | os.PathLike) -> "ManagedProcess":
        self.cwd = str(cwd)
        return self

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "ManagedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            self._log_file.close()
            raise RuntimeError(f"cannot start {self.name}: {exc} (argv: {self.argv})") from exc
        with _live_lock:
            _live.add(self)
        return self

    def wait_ready(self, strategy: WaitStrategy, hint: str = "") -> "ManagedProcess":
        try:
            wait_until_ready(self, strategy, hint)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGINT, a bounded wait, then SIGKILL of the whole process group.

        SIGINT first because Envoy and our services flush (spans, logs) on it; the kill
        afterwards is what guarantees that no orphan survives a wedged child.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait(timeout=5)
        # Anything the child left behind in its group goes too.
        self._signal_group(signal.SIGKILL)
        with _live_lock:
            _live.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return proc.returncode

    def kill(self) -> None:
        """Hard kill, for fault tests: no chance to flush."""
        if self._proc is not None and self._proc.poll() is None:
            self._signal_group(signal.SIGKILL)
            self._proc.wait(timeout=5)

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "ManagedProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- inspection ----------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def read_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.read_log().splitlines()[-lines:])


def stop_all() -> None:
    with _live_lock:
        live = list(_live)
    for proc in live:
        proc.stop(grace_s=2.0)


def live_processes() -> list[ManagedProcess]:
    with _live_lock:
        return [p for p in _live if p.is_running()]


atexit.register(stop_all)
