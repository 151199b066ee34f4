"""Build the upstream GAIE EPP (Gateway API Inference Extension v1.5.0, ``cmd/epp``) into the kit's cache, once.

The ``gaie-epp`` mode runs this binary. ``eppkit bootstrap --all`` builds it, or the first testbed of that
mode does, with progress; later calls reuse ``<cache>/gaie-epp/v1.5.0/epp``. ``go install ...@v1.5.0``
is not used: it asks the module proxy for the version list, which some proxies refuse. A throwaway
wrapper module that ``go get``s the *package* ``cmd/epp`` (so every dependency lands in its go.sum)
and builds it works everywhere a pinned version can be fetched.

    python -m eppkit.builds.gaie          # build (or reuse) and print the path
    python -m eppkit.builds.gaie --find   # print the path only if already built
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from eppkit.builds.steps import build_folder, build_main, go_version, run_step
from eppkit.core.paths import cache_dir, cache_lock

VERSION = "v1.5.0"
MODULE = "sigs.k8s.io/gateway-api-inference-extension"
PACKAGE = f"{MODULE}/cmd/epp"
# The upstream image sets the build ref with ldflags; without it the EPP logs an empty version.
LDFLAGS = f"-X {MODULE}/version.BuildRef={VERSION}"
BINARY = "epp"


class GaieBuildError(RuntimeError):
    """The EPP did not build; the message carries the log tail and a hint."""


def build_dir() -> Path:
    return cache_dir() / "gaie-epp" / VERSION


def find() -> Path | None:
    """The built EPP, or None when it has not been built yet."""
    binary = build_dir() / BINARY
    return binary if binary.is_file() else None


def go_missing_message() -> str:
    return (f"the gaie-epp mode needs the GAIE EPP {VERSION}, built from source: `go` is not on PATH.\n"
            "Hint: install Go >= 1.24 and a C compiler, then run `eppkit bootstrap --all` (or start a gaie-epp "
            "testbed: it builds it first).")


def build(progress: Callable[[str], object] = print, *, force: bool = False) -> Path:
    """Build the EPP (or reuse the cached build) and return its path. Cold: minutes; warm Go caches: ~30 s."""
    out = build_dir()
    binary = out / BINARY
    if binary.is_file() and not force:
        return binary
    go = shutil.which("go")
    if go is None:
        raise GaieBuildError(go_missing_message())
    out.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(out.parent / f"{VERSION}.lock"):
        if binary.is_file() and not force:  # built by someone else while we waited
            return binary
        return _build_locked(go, out, progress)


def _build_locked(go: str, out: Path, progress: Callable[[str], object]) -> Path:
    env = {**os.environ, "CGO_ENABLED": "1", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
    hint = f"the Go module proxy must serve {MODULE} {VERSION} and its dependencies (GOPROXY, network)"
    started = time.monotonic()
    with build_folder(out, out.parent / f"{VERSION}.failed.log") as (tmp, log, info):
        wrapper = tmp / "wrapper"
        wrapper.mkdir()
        steps = [
            ("creating a wrapper module", [go, "mod", "init", "eppkit-gaie-epp-wrapper"]),
            (f"fetching {PACKAGE}@{VERSION} and its dependencies", [go, "get", f"{PACKAGE}@{VERSION}"]),
            (f"compiling the GAIE EPP {VERSION} (cold: 4-8 min on 2 cores; warm: ~30 s)",
             [go, "build", f"-ldflags={LDFLAGS}", "-o", str(tmp / BINARY), PACKAGE]),
        ]
        for what, cmd in steps:
            run_step(progress, log, what, cmd, wrapper, env, label="gaie-epp", hint=hint, error=GaieBuildError)
        info.update({"package": PACKAGE, "version": VERSION, "go": go_version(go, env), "ldflags": LDFLAGS})
    progress(f"gaie-epp: built {out / BINARY} in {time.monotonic() - started:.1f} s")
    return out / BINARY


def version_line(binary: Path) -> str:
    """``go version -m``'s line for the GAIE module (what was built), or ``unknown``."""
    go = shutil.which("go")
    if go is None:
        return VERSION
    try:
        text = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return VERSION
    return next((" ".join(line.split()[1:3]) for line in text.splitlines() if line.split()[1:2] == [MODULE]), VERSION)


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, "python -m eppkit.builds.gaie", __doc__, find, build, GaieBuildError)


if __name__ == "__main__":
    sys.exit(main())
