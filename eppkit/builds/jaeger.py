"""Jaeger v2: built once from its Go module into the cache (the component that runs it: eppkit.components.jaeger).

Jaeger's v2 tags (v2.x.y) cannot be fetched by tag: its module path has no /v2. Each
v2 release was tagged together with a v1 tag on the same commit, and the v1 tag *is*
fetchable, so we pin the v1 tag of the v2 release we want. `go install` refuses the
module (its go.mod has a replace directive), so we download the module and `go build`
inside it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from eppkit.core.paths import cache_dir, cache_lock

JAEGER_MODULE = "github.com/jaegertracing/jaeger"
# The commit of the v1.76.0 / v2.13.0 release (CHANGELOG: "v1.76.0 / v2.13.0"). Newer v2 releases are not
# to be had here: the module proxy lists v1.76.0 as the newest version and answers 403 "not available"
# for v2.20.0's commit (798e4b0fcf22), checked 2026-11-22.
JAEGER_MODULE_TAG = "v1.76.0"
JAEGER_VERSION = "v2.13.0"


def binary_path() -> Path:
    return cache_dir() / "bin" / f"jaeger-{JAEGER_VERSION}"


def find() -> Path | None:
    """The Jaeger binary: $EPPKIT_JAEGER, else the cached build."""
    explicit = os.environ.get("EPPKIT_JAEGER")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    path = binary_path()
    return path if path.is_file() else None


def version(binary: Path) -> str:
    proc = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=30)
    text = proc.stdout.strip()
    try:
        info = json.loads(text.splitlines()[0])
    except (ValueError, IndexError):
        return text or "unknown"
    commit = info.get("gitCommit")
    return info.get("gitVersion", "unknown") + (f" ({commit[:12]})" if commit else "")


def build(progress: Callable[[str], None] = print) -> Path:
    """Build Jaeger into the cache unless it is already there. Returns the binary's path.

    Two processes building at once (two bootstraps, parallel test workers) build it once: the
    second waits on the cache lock, then finds it built."""
    target = binary_path()
    if target.is_file():
        progress(f"jaeger {JAEGER_VERSION}: cached at {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(target.parent / f".jaeger-{JAEGER_VERSION}.lock"):
        if target.is_file():
            progress(f"jaeger {JAEGER_VERSION}: built meanwhile by another process: {target}")
            return target
        return _build_locked(target, progress)


def _build_locked(target: Path, progress: Callable[[str], None]) -> Path:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build Jaeger v2 once (https://go.dev/dl/); none found on PATH")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    progress(f"jaeger {JAEGER_VERSION}: downloading module {JAEGER_MODULE}@{JAEGER_MODULE_TAG} ...")
    dl = subprocess.run([go, "mod", "download", "-json", f"{JAEGER_MODULE}@{JAEGER_MODULE_TAG}"],
                        capture_output=True, text=True, env=env, timeout=1800)
    if dl.returncode != 0:
        raise RuntimeError(f"go mod download failed:\n{dl.stdout[-2000:]}{dl.stderr[-2000:]}")
    info = json.loads(dl.stdout)
    module_dir = info["Dir"]
    commit = (info.get("Origin") or {}).get("Hash", "")
    progress("jaeger: listing packages to compile ...")
    listing = subprocess.run([go, "list", "-deps", "./cmd/jaeger"], cwd=module_dir, capture_output=True,
                             text=True, env=env, timeout=1800)
    total = len(listing.stdout.split()) or 1
    tmp = target.with_name(target.name + ".partial")
    # -s -w: no symbol table and no DWARF (a panic still names its functions): the link of a 120 MB binary is a
    # third of it shorter, on a cold bootstrap's critical path (README command 1).
    ldflags = f"-s -w -X {JAEGER_MODULE}/internal/version.latestVersion={JAEGER_VERSION}"
    if commit:
        ldflags += f" -X {JAEGER_MODULE}/internal/version.commitSHA={commit}"
    cmd = [go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), "./cmd/jaeger"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done, tail = 0, []
    last_report = 0.0
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-30:]
        if not line.startswith("go: "):
            done += 1
        now = time.monotonic()
        if now - last_report >= 5:
            last_report = now
            progress(f"jaeger: compiled {done}/{total} packages ({min(100, done * 100 // total)}%), {now - started:.0f}s")
    if proc.wait() != 0:
        raise RuntimeError("building Jaeger failed:\n" + "\n".join(tail))
    tmp.rename(target)
    progress(f"jaeger {JAEGER_VERSION}: built in {time.monotonic() - started:.0f}s -> {target}")
    return target


