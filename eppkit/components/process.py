"""A managed child process: started in a ``with``, logged to a file, always stopped.

Guarantees that nothing outlives the kit:
- every child runs in its own session (process group) so we can signal the whole group;
- on Linux each child also gets PR_SET_PDEATHSIG=SIGKILL (set by setpriv as it execs), so even a SIGKILLed parent
  (where no ``finally`` runs) takes its children with it;
- every started process is registered and stopped at interpreter exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from eppkit.components import zygote
from eppkit.components.base import Component, LiveSet
from eppkit.core.procfs import dying_with_parent
from eppkit.core.settings import settings


class ManagedProcess(Component):
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
        # its spawn environment: this one's, what the kit's settings hold beyond it (pytest --eppkit-runs), its own
        env = {**os.environ, **settings().env(), **self.env, "PYTHONUNBUFFERED": "1"}
        module = kit_service(self.argv)
        if module is not None:
            if zygote.enabled(env):  # forked from a warm interpreter (eppkit.components.zygote)
                try:
                    self._proc = zygote.zygote().spawn(module, self.argv[3:], env, self.cwd, self.log_path)
                except OSError as exc:
                    raise RuntimeError(f"cannot start {self.name}: {exc} (argv: {self.argv})") from exc
                _live.add(self)
                return self
        argv = self.argv
        # Linux sends the parent-death signal when the *thread* that forked the child ends: a process started
        # from a worker thread (a pool that starts a testbed) would be killed with that thread. Such a one is
        # stopped by its owner, or found by the leak check, instead.
        if threading.current_thread() is threading.main_thread():
            executable = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else argv[0]
            if executable is None or not os.path.exists(os.path.join(self.cwd or "", executable)):
                raise RuntimeError(f"cannot start {self.name}: {argv[0]} not found (argv: {self.argv})")
            argv = dying_with_parent(argv)
        self._log_file = open(self.log_path, "ab", buffering=0)
        try:
            self._proc = subprocess.Popen(
                argv,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,  # no preexec_fn: subprocess may vfork (procfs.dying_with_parent)
            )
        except OSError as exc:
            self._log_file.close()
            raise RuntimeError(f"cannot start {self.name}: {exc} (argv: {self.argv})") from exc
        _live.add(self)
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

    # -- inspection ----------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


_live: LiveSet[ManagedProcess] = LiveSet(grace_s=2.0)
stop_all = _live.stop_all


def live_processes() -> list[ManagedProcess]:
    return _live.snapshot(lambda p: p.is_running())


def kit_service(argv: Sequence[str]) -> str | None:
    """The module when ``argv`` starts a kit service with this interpreter (``python -m eppkit.services.<name>``)."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2].startswith("eppkit.services."):
        return argv[2]
    return None


def service_argv(module: str, port: int, args: Sequence[str] = (), *, python: str = sys.executable,
                 host: str = "127.0.0.1") -> list[str]:
    """How every kit service starts: ``python -m <module> --host 127.0.0.1 --port <port> <args>``."""
    return [python, "-m", module, "--host", host, "--port", str(port), *map(str, args)]


class ServiceProcess(ManagedProcess):
    """One kit service (``python -m eppkit.services.<name>``) on its own, for a ``with`` block in a test or
    a benchmark: a managed process on a port from :class:`~eppkit.components.ports.PortAllocator`, ready when
    ``/health`` answers; a failed start raises with the log's tail and a hint."""

    __test__ = False

    def __init__(self, module: str = "eppkit.services.vllm", args: Sequence[str] = (), *, port: int | None = None,
                 startup_timeout: float = 15.0, log_dir: Path | None = None) -> None:
        from eppkit.components.ports import PortAllocator

        self.module = module
        self.args = list(args)
        self._ports = PortAllocator()  # its lease on the port lasts as long as this object
        self.port = port or self._ports.port()
        self.startup_timeout = startup_timeout
        name = module.rsplit(".", 1)[-1]
        log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"eppkit-{name}-"))
        super().__init__(name, [], log_dir / f"{name}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServiceProcess":
        from eppkit.components.readiness import HttpReady

        self.argv = service_argv(self.module, self.port, self.args)
        super().start()
        return self.wait_ready(HttpReady(f"{self.url}/health", timeout_s=self.startup_timeout),
                               hint=f"run `python -m {self.module} --port {self.port} {' '.join(self.args)}` by hand")

    def __enter__(self) -> "ServiceProcess":
        return self if self.is_running() else self.start()
