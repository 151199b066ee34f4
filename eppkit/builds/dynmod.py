"""Build a Go dynamic module into the kit's cache, once per source version.

``build()`` returns the path of ``libeppkit_callout.so`` (plugins/dynamic_module); the
dynmod-callout mode hands it to Envoy as an absolute ``module.local.filename``. The same cached,
locked build serves a user's Go module directory (``build(source_dir=..., lib_name=...)``, see
``eppkit.gateway.user_filters``) and the multipart experiment (``package="./experiments/multipart/module"``).
The cache key is a hash of the module's sources (``go.mod``, ``go.sum``, every non-test ``.go``
file), the package built, the library name and the build flags, so an edit rebuilds and a
second call reuses the build. ``find()`` answers without building.

    python -m eppkit.builds.dynmod          # build (or reuse) and print the path
    python -m eppkit.builds.dynmod --find   # print the path only if already built

The Go SDK comes from the Go module proxy, pinned in go.mod/go.sum; see docs/modes-dynmod.md
for why it is the 2026-04-23 pseudo-version and not Envoy 1.40.0's commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eppkit.builds.steps import BuildError, build_main, go_version, run_step
from eppkit.core.paths import PLUGINS, cache_dir, cache_lock

SOURCE_DIR = PLUGINS / "dynamic_module"
LIB_NAME = "libeppkit_callout.so"

# The Go SDK hands Go pointers to Envoy by design, which the cgo pointer checks reject
# ("cgo result is unpinned Go pointer" at the first filter config). Upstream runs Envoy with
# GODEBUG=cgocheck=0, and so does the kit's Envoy whenever it loads a module (eppkit.gateway.go_modules:
# a module built elsewhere has no such default). Baked in as the module's default too, it loads in an
# Envoy someone else runs without that environment. (cgocheck cannot be set by a //go:debug line or
# go.mod's godebug block.) The one definition of the setting, for both.
CGOCHECK_OFF = "cgocheck=0"
LDFLAGS = f"-X=runtime.godebugDefault={CGOCHECK_OFF}"
BUILD_ARGS = ("build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", f"-ldflags={LDFLAGS}")


class DynmodBuildError(BuildError):
    """The module did not build; the message carries the log tail and a hint."""


def source_files(source_dir: Path | None = None, *, package: str = ".") -> list[Path]:
    """The files whose content decides the .so: go.mod, go.sum and non-test Go sources.

    A top-level ``experiments/`` folder holds builds of its own (the multipart probe): left out
    unless ``package`` is inside it.
    """
    src = source_dir or SOURCE_DIR
    in_experiments = Path(package).parts[:1] == ("experiments",)
    files = [p for p in (src / "go.mod", src / "go.sum") if p.exists()]
    for p in sorted(src.rglob("*.go")):
        rel = p.relative_to(src)
        if p.name.endswith("_test.go") or (rel.parts[0] == "experiments" and not in_experiments):
            continue
        files.append(p)
    return files


def source_hash(source_dir: Path | None = None, *, package: str = ".", lib_name: str = LIB_NAME) -> str:
    src = source_dir or SOURCE_DIR
    h = hashlib.sha256()
    h.update(" ".join(BUILD_ARGS).encode())
    if (package, lib_name) != (".", LIB_NAME):  # the kit's own build keeps the key it always had
        h.update(f"\0{package}\0{lib_name}".encode())
    for p in source_files(src, package=package):
        h.update(b"\0" + str(p.relative_to(src)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def build_dir(source_dir: Path | None = None, *, package: str = ".", lib_name: str = LIB_NAME) -> Path:
    """Where the build for the current sources lives (exists only once built)."""
    return cache_dir() / "dynmod" / source_hash(source_dir, package=package, lib_name=lib_name)[:16]


def find(source_dir: Path | None = None, *, package: str = ".", lib_name: str = LIB_NAME) -> Path | None:
    """The built module for the current sources, or None when it has not been built yet."""
    lib = build_dir(source_dir, package=package, lib_name=lib_name) / lib_name
    return lib if lib.is_file() else None


def build(
    progress: Callable[[str], object] = print,
    *,
    source_dir: Path | None = None,
    force: bool = False,
    package: str = ".",
    lib_name: str = LIB_NAME,
) -> Path:
    """Build the module for the current sources (or reuse the cached build) and return its path.

    ``source_dir`` is a Go module (go.mod at its top; default: the kit's plugins/dynamic_module),
    ``package`` the main package in it to build, ``lib_name`` the file name of the .so.
    """
    src = Path(source_dir or SOURCE_DIR).resolve()
    if not (src / "go.mod").is_file():
        raise DynmodBuildError(f"cannot build the dynamic module in {src}: no go.mod there (a Go module directory is needed)")
    out = build_dir(src, package=package, lib_name=lib_name)
    lib = out / lib_name
    if lib.is_file() and not force:
        return lib
    go = shutil.which("go")
    if go is None:
        raise DynmodBuildError(
            "cannot build the dynamic module: `go` is not on PATH.\n"
            "Hint: install Go >= 1.25.6 (the Envoy Go SDK needs it) and a C compiler for cgo, "
            "then run `eppkit bootstrap` again."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(out.parent / f"{out.name}.lock"):
        if lib.is_file() and not force:  # built by someone else while we waited
            return lib
        return _build_locked(go, src, out, progress, package=package, lib_name=lib_name)


def _build_locked(go: str, src: Path, out: Path, progress: Callable[[str], object], *,
                  package: str, lib_name: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; a container user may need to read the module
    log_path = tmp / "build.log"
    env = {
        **os.environ,
        "CGO_ENABLED": "1",
        "GOTOOLCHAIN": "local",  # never download a toolchain
        "GOFLAGS": "-mod=readonly",  # go.sum is the pin: fail rather than re-resolve
    }
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            run_step(progress, log, f"downloading Go modules of {src} (Envoy Go SDK)", [go, "mod", "download"], src,
                     env, label="dynmod", error=DynmodBuildError,
                     hint="the Go module proxy must serve github.com/envoyproxy/envoy/source/extensions/dynamic_modules "
                          "at the go.mod version (GOPROXY, GOFLAGS, network)")
            run_step(progress, log, f"compiling {lib_name} (cold: 30-60 s on 2 cores)",
                     [go, *BUILD_ARGS, "-o", str(tmp / lib_name), package], src, env, label="dynmod",
                     error=DynmodBuildError,
                     hint="cgo needs a C compiler (gcc); an SDK API change shows as a compile error above")
        (tmp / "build-info.json").write_text(json.dumps({
            "source_dir": str(src),
            "package": package,
            "source_hash": source_hash(src, package=package, lib_name=lib_name),
            "go": go_version(go, env),
            "build_args": list(BUILD_ARGS),
            "seconds": round(time.monotonic() - started, 1),
        }, indent=2) + "\n")
        (tmp / f"{Path(lib_name).stem}.h").unlink(missing_ok=True)  # cgo's header: not needed
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        # Keep the failed log next to the cache for a look; the tmp dir is not a cache hit.
        failed = out.parent / f"{out.name}.failed.log"
        if log_path.exists():
            shutil.copyfile(log_path, failed)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"dynmod: built {out / lib_name} in {time.monotonic() - started:.1f} s")
    return out / lib_name


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, "python -m eppkit.builds.dynmod", __doc__, find, build, DynmodBuildError)


if __name__ == "__main__":
    sys.exit(main())
