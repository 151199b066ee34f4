"""The kit's own Go programs (a folder of eppkit with its go.mod: the floors, the load client), each built once per
source version into ``~/.cache/eppkit/bin`` by Go through the Go module proxy, as the commands that run them need
them (``eppkit bootstrap`` builds them all)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eppkit.builds.gotools import go_build
from eppkit.core.paths import cache_dir, cache_lock

PACKAGE = Path(__file__).resolve().parent.parent  # eppkit/
FILES = ("main.go", "go.mod", "go.sum")


class OwnGoBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class OwnGo:
    """One of the kit's Go programs: its folder (``eppkit/<folder>``), the binary's name and who needs it (said when
    Go is missing, with what to do instead)."""

    name: str  # the cached binary is eppkit-<name>-<digest of its sources>
    folder: str
    without_go: str  # what to do where Go is missing

    @property
    def source(self) -> Path:
        return PACKAGE / self.folder

    def path(self) -> Path:
        digest = hashlib.sha256(b"".join((self.source / name).read_bytes() for name in FILES)).hexdigest()[:12]
        return cache_dir() / "bin" / f"eppkit-{self.name}-{digest}"

    def find(self) -> Path | None:
        return self.path() if self.path().is_file() else None

    def build(self, progress: Callable[[str], object] = print) -> Path:
        """The binary, built now unless cached (a minute or so with Go's module cache cold)."""
        target = self.path()
        if target.is_file():
            return target
        go = shutil.which("go")
        if go is None:
            raise OwnGoBuildError(f"the {self.name} is a Go program and Go is not on PATH: install Go "
                                  f"(https://go.dev/dl/), or {self.without_go}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with cache_lock(target.with_name(target.name + ".lock")):
            if target.is_file():
                return target
            progress(f"{self.name}: building {self.source} (once; cached in {target.parent}) ...")
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix=f"eppkit-{self.name}-") as work:  # an install may be read-only
                for name in FILES:
                    shutil.copy(self.source / name, work)
                go_build(go, work, target, env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0",
                                                "GOTOOLCHAIN": "local"},
                         name=self.name, timeout_s=1800, error=OwnGoBuildError)
            progress(f"{self.name}: built in {time.monotonic() - started:.0f} s -> {target}")
        return target


# The floors: a picker that costs nothing, per transport (eppkit compare's floors, bench.epp_hop).
FLOORS = OwnGo("floor", "floors", without_go="run eppkit compare with --no-floors")
# The load client: the EPP verdict's sustained-load requests (eppkit.native_load).
LOAD_CLIENT = OwnGo("load", "loadgen", without_go="give eppkit conformance --quick (the verdict then says the EPP "
                    "was not held under sustained load)")
