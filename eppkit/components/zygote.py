"""The kit's Python services forked from one warm interpreter, not each started from a cold one.

A kit service (``python -m eppkit.services.<name>``) spends about 0.4 s of CPU importing aiohttp, gRPC and
OpenTelemetry before it serves anything, and a test suite starts thousands of them. On Linux the local runtime
starts one *zygote* per session instead: ``python -m eppkit.components.zygote``, which imports every service's
modules once and then forks a child per service asked of it. A child is what ``python -m`` would have been: its
own session (process group), its environment, working folder, argv and log file, killed when the zygote goes
(which goes when the session that started it goes); it runs the module as ``__main__`` and exits with its code.

The session drives the zygote over its stdin (one JSON request a line) and reads its stdout (a pid for each
request, an exit status for each child); :class:`ForkedChild` is the session's handle on a child, with the part
of :class:`subprocess.Popen` a :class:`~eppkit.components.process.ManagedProcess` uses (``pid``, ``poll``,
``wait``, ``returncode``). ``EPPKIT_SERVICE_START=exec`` turns this off (every service its own interpreter).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from eppkit.core import settings as kit_settings
from eppkit.core.procfs import die_with_parent

ENV = kit_settings.Settings.variable("service_start")
PACKAGE = "eppkit.services"


def enabled(env: dict[str, str]) -> bool:
    """Whether a kit service started with ``env`` may come from the zygote: on Linux, unless turned off, and only
    when the interpreter it would get is this one (no PYTHON* setting of its own: those act at start-up)."""
    if kit_settings.settings().service_start != "fork" or not sys.platform.startswith("linux"):
        return False
    return all(env.get(k) == os.environ.get(k) for k in set(env) | set(os.environ)
               if k.startswith("PYTHON") and k != "PYTHONUNBUFFERED")


class ZygoteGone(RuntimeError):
    pass


class ForkedChild:
    """One forked service as ``subprocess.Popen`` shows a child: pid, poll, wait, returncode."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode  # type: ignore[return-value]


class Zygote:
    """The session's side: the zygote process, a request per child, a reader thread for the answers.

    The zygote exits when its stdin closes, which a session's exit does however it ends (no kill-with-parent
    setting: that follows the thread that started a process, and a testbed may start from a passing thread).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._replied = threading.Condition(self._lock)
        self._children: dict[int, ForkedChild] = {}
        self._early: dict[int, int] = {}  # exit statuses that came before the pid's reply was read
        self._next = 0
        self.owner = os.getpid()  # a process forked from the session has a zygote of its own, if it needs one
        self._proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=None, start_new_session=True,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, name="eppkit-zygote", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def spawn(self, module: str, args: list[str], env: dict[str, str], cwd: str | None, log_path: Path,
              timeout_s: float = 60.0) -> ForkedChild:
        """Fork ``python -m module args`` with this environment, folder and log; its handle."""
        request = {"module": module, "args": list(args), "env": env, "cwd": cwd, "log": str(log_path)}
        with self._lock:
            self._next += 1
            request["id"] = ident = self._next
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                raise ZygoteGone(f"the service zygote (pid {self.pid}) is gone") from exc
            deadline = time.monotonic() + timeout_s
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    raise ZygoteGone(f"the service zygote (pid {self.pid}) did not fork {module}")
                self._replied.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
            if "error" in reply:
                raise OSError(reply["error"])
            child = ForkedChild(reply["pid"])
            self._children[child.pid] = child
            if child.pid in self._early:
                child._exited(self._early.pop(child.pid))
            return child

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "exited" in message:
                    child = self._children.pop(message["exited"], None)
                    if child is None:
                        self._early[message["exited"]] = message["code"]
                    else:
                        child._exited(message["code"])
                else:
                    self._replies[message["id"]] = message
                    self._replied.notify_all()
        # The zygote is gone, and every child with it (each dies with its parent).
        with self._lock:
            for child in self._children.values():
                child._exited(-signal.SIGKILL)
            self._children.clear()
            self._replied.notify_all()

    def stop(self) -> None:
        """Close its stdin: it kills what it still runs and exits."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        self._reader.join(timeout=5)


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote:
    """This process's zygote, started on first use (again if it died)."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.owner != os.getpid() or not _zygote.alive():
            _zygote = Zygote()
        return _zygote


def running_pid() -> int | None:
    """The pid of this process's zygote when one runs (the leak check spares it)."""
    mine = _zygote is not None and _zygote.owner == os.getpid()
    return _zygote.pid if mine and _zygote.alive() else None


def stop() -> None:
    global _zygote
    with _zygote_lock:
        if _zygote is not None and _zygote.owner == os.getpid():
            _zygote.stop()
        _zygote = None


# At exit, after the managed processes' own stop (registered later, so run first: each service gets its SIGINT).
atexit.register(stop)


# -- the zygote process itself --------------------------------------------------------------------------------

def _preload() -> None:
    """Import every module of the kit's services (their ``__main__`` modules excepted: those run per child)."""
    import importlib
    import pkgutil

    package = importlib.import_module(PACKAGE)
    for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
        if not info.name.endswith("__main__"):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - a child that needs it will say why
                print(f"eppkit zygote: could not preload {info.name}: {exc}", file=sys.stderr)


def _child(request: dict, private_fds: list[int]) -> None:
    """In the forked child: become ``python -m module args``; never returns."""
    code = 1
    try:
        os.setsid()
        die_with_parent()
        for fd in private_fds:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        sys.stdout = sys.__stdout__
        if request["cwd"]:
            os.chdir(request["cwd"])
        os.environ.clear()  # the child's own spawn environment, as exec would have given it
        os.environ.update(request["env"])
        kit_settings.reread()  # its settings are its environment's, not the zygote's
        sys.argv = [request["module"], *request["args"]]
        if request["cwd"]:  # as `python -m` puts the working folder first
            sys.path.insert(0, os.getcwd())
        code = _run(request["module"])
    except BaseException:  # noqa: BLE001 - the child must reach os._exit whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken log: nothing left to tell
                stream.flush()
        os._exit(code)


def _run(module: str) -> int:
    """Run the module as ``__main__``, then what an interpreter does at exit; its exit code."""
    import atexit
    import runpy
    import traceback

    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at an interpreter's exit
    atexit._run_exitfuncs()
    return code


def main() -> None:
    import selectors

    # The protocol's own descriptors, moved off 0 and 1 (a child takes those for /dev/null and its log).
    requests_fd, replies_fd = os.dup(0), os.dup(1)
    sys.stdout = sys.stderr
    _preload()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C reaches the session's process group, not the services'
    private = [requests_fd, replies_fd, wake_r, wake_w]
    requests = os.fdopen(requests_fd, "rb", buffering=0)
    replies = os.fdopen(replies_fd, "wb", buffering=0)
    children: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(requests_fd, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    if hasattr(selector, "fileno"):  # epoll's own descriptor: a child keeps none of the zygote's
        private.append(selector.fileno())
    pending = b""

    def reply(message: dict) -> None:
        replies.write((json.dumps(message) + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    try:
        while True:
            for key, _ in selector.select():
                if key.fd == wake_r:
                    try:
                        os.read(wake_r, 512)
                    except BlockingIOError:
                        pass
                    reap()
                    continue
                chunk = os.read(requests_fd, 65536)
                if not chunk:  # the session is done with us
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    try:
                        pid = os.fork()
                    except OSError as exc:
                        reply({"id": request["id"], "error": f"cannot fork {request['module']}: {exc}"})
                        continue
                    if pid == 0:
                        _child(request, private)
                    children.add(pid)
                    reply({"id": request["id"], "pid": pid})
            reap()
    finally:
        for pid in children:  # each leads its own group
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        del requests


if __name__ == "__main__":
    main()
