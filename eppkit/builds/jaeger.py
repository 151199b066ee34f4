"""Jaeger v2: built once from its Go module into the cache (the component that runs it: eppkit.components.jaeger).

Jaeger's v2 tags (v2.x.y) cannot be fetched by tag: its module path has no /v2. Each
v2 release was tagged together with a v1 tag on the same commit, and the v1 tag *is*
fetchable, so we pin the v1 tag of the v2 release we want. `go install` refuses the
module (its go.mod has a replace directive), so we download the module and `go build`
inside it.

The kit builds only what it runs: in a copy of the downloaded module, it replaces the list of
components (cmd/jaeger/internal/components.go: the OTLP receiver, the batch processor, the storage exporter, the
storage, query and health-check extensions, which eppkit/components/jaeger.yaml.j2 names), the storage
extension's backends (memory only) and the main's Elasticsearch subcommand, with the files in jaeger_build/.
What is left out (the other receivers, exporters, processors, connectors and extensions, and the Badger,
Cassandra, Elasticsearch, OpenSearch, ClickHouse, gRPC and Kafka storages) was three quarters of the packages
and of a cold build's time (docs/benchmarks.md, "A fresh machine").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.settings import settings

JAEGER_MODULE = "github.com/jaegertracing/jaeger"
# The commit of the v1.76.0 / v2.13.0 release (CHANGELOG: "v1.76.0 / v2.13.0"). Newer v2 releases are not
# to be had here: the module proxy lists v1.76.0 as the newest version and answers 403 "not available"
# for v2.20.0's commit (798e4b0fcf22), checked 2026-11-22.
JAEGER_MODULE_TAG = "v1.76.0"
JAEGER_VERSION = "v2.13.0"
# The files of jaeger_build/ that stand in for Jaeger's own in the kit's build, and the module file each replaces.
OVERLAY = {
    "components.go": "cmd/jaeger/internal/components.go",
    "main.go": "cmd/jaeger/main.go",
    "jaegerstorage_config.go": "cmd/jaeger/internal/extension/jaegerstorage/config.go",
    "jaegerstorage_extension.go": "cmd/jaeger/internal/extension/jaegerstorage/extension.go",
    "v1factory.go": "internal/storage/v1/factory/factory.go",
}
# Module files the kit's build drops: the v1 storage factory's config (every v1 backend's options).
OVERLAY_REMOVED = ("internal/storage/v1/factory/config.go",)


def binary_path() -> Path:
    """The cached build, named by Jaeger's version and the kit's files that stand in for Jaeger's (a change to them
    is a new build)."""
    digest = hashlib.sha256()
    for name in sorted(OVERLAY):
        digest.update(name.encode() + b"\0" + (Path(__file__).with_name("jaeger_build") / name).read_bytes())
    return cache_dir() / "bin" / f"jaeger-{JAEGER_VERSION}-eppkit-{digest.hexdigest()[:8]}"


def find() -> Path | None:
    """The Jaeger binary: $EPPKIT_JAEGER, else the cached build."""
    explicit = settings().jaeger
    if explicit:
        return explicit if explicit.is_file() else None
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
    with tempfile.TemporaryDirectory(prefix=".jaeger-src.", dir=target.parent) as scratch:
        source = kit_source(Path(module_dir), Path(scratch) / "jaeger")
        return _compile(go, env, source, commit, target, progress)


def kit_source(module_dir: Path, into: Path) -> Path:
    """A copy of Jaeger's module with the kit's component list (jaeger_build/) in place of Jaeger's own files.

    A copy, not `go build -overlay` over the module cache: Go refuses to overlay files beneath GOMODCACHE."""
    shutil.copytree(module_dir, into, copy_function=shutil.copyfile,
                    ignore=shutil.ignore_patterns("*_test.go", "testdata", "*.md"))
    for folder, _, _ in os.walk(into):
        os.chmod(folder, 0o755)  # the module cache's folders are read-only; copytree copied their mode
    here = Path(__file__).with_name("jaeger_build")
    for ours, theirs in OVERLAY.items():
        shutil.copyfile(here / ours, into / theirs)
    for theirs in OVERLAY_REMOVED:
        (into / theirs).unlink()
    return into


def _compile(go: str, env: dict[str, str], source: Path, commit: str, target: Path,
             progress: Callable[[str], None]) -> Path:
    progress("jaeger: listing packages to compile ...")
    listing = subprocess.run([go, "list", "-deps", "./cmd/jaeger"], cwd=source,
                             capture_output=True, text=True, env=env, timeout=1800)
    total = len(listing.stdout.split()) or 1
    tmp = target.with_name(target.name + ".partial")
    # -s -w: no symbol table and no DWARF (a panic still names its functions): the link of a 120 MB binary is a
    # third of it shorter, on a cold bootstrap's critical path (README command 1).
    ldflags = f"-s -w -X {JAEGER_MODULE}/internal/version.latestVersion={JAEGER_VERSION}"
    if commit:
        ldflags += f" -X {JAEGER_MODULE}/internal/version.commitSHA={commit}"
    cmd = [go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), "./cmd/jaeger"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=source, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
