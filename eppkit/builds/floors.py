"""The floor programs (``eppkit/floors``: a picker that costs nothing, per transport) built once per source version
into ``~/.cache/eppkit/bin`` by Go (through the Go module proxy), as ``eppkit compare`` and ``bench.epp_hop`` need
them. Moved here from bench/noop_epp, whose ext_proc floor it still is."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eppkit.core.paths import cache_dir, cache_lock

SOURCE = Path(__file__).resolve().parent.parent / "floors"
FILES = ("main.go", "go.mod", "go.sum")
TRANSPORTS = ("extproc", "callout", "frontend")


class FloorBuildError(RuntimeError):
    pass


def path() -> Path:
    digest = hashlib.sha256(b"".join((SOURCE / name).read_bytes() for name in FILES)).hexdigest()[:12]
    return cache_dir() / "bin" / f"eppkit-floor-{digest}"


def find() -> Path | None:
    return path() if path().is_file() else None


def build(progress: Callable[[str], object] = print) -> Path:
    """The floor binary, built now unless cached (a minute with Go's module cache cold)."""
    target = path()
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise FloorBuildError("the floors are a Go program and Go is not on PATH: install Go (https://go.dev/dl/), "
                              "or run eppkit compare with --no-floors")
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(target.with_name(target.name + ".lock")):
        if target.is_file():
            return target
        progress(f"floors: building {SOURCE} (once; cached in {target.parent}) ...")
        started = time.monotonic()
        partial = target.with_name(target.name + ".partial")
        with tempfile.TemporaryDirectory(prefix="eppkit-floors-") as work:  # an installed package may be read-only
            for name in FILES:
                shutil.copy(SOURCE / name, work)
            proc = subprocess.run([go, "build", "-trimpath", "-o", str(partial), "."], cwd=work, capture_output=True,
                                  text=True, timeout=1800,
                                  env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"})
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith("go: downloading")]
            raise FloorBuildError("floors: go build failed:\n" + "\n".join(lines[-20:]))
        partial.rename(target)
        progress(f"floors: built in {time.monotonic() - started:.0f} s -> {target}")
    return target
