"""Jaeger v2: built once from its Go module, cached, and run with memory storage.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jinja2

from eppkit.component import Component
from eppkit.launchers import Launcher, ProcessLauncher
from eppkit.paths import OBSERVABILITY, cache_dir
from eppkit.readiness import HttpReady
from eppkit.topology import PortAllocator

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
    """Build Jaeger into the cache unless it is already there. Returns the binary's path."""
    target = binary_path()
    if target.is_file():
        progress(f"jaeger {JAEGER_VERSION}: cached at {target}")
        return target
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
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".partial")
    ldflags = f"-X {JAEGER_MODULE}/internal/version.latestVersion={JAEGER_VERSION}"
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


@dataclass
class JaegerPorts:
    otlp_grpc: int
    otlp_http: int
    query_http: int
    query_grpc: int
    health: int


class Jaeger:
    """A Jaeger all-in-one on loopback with memory storage, in a ``with``: a process of this host
    (default: the cached binary) or, with a :class:`~eppkit.launchers.ContainerLauncher`, a container."""

    def __init__(self, run_dir: Path, launcher: Launcher | None = None, ports: PortAllocator | None = None,
                 max_traces: int = 200_000):
        self.run_dir = Path(run_dir)
        if launcher is None:
            binary = find()
            if binary is None:
                raise FileNotFoundError("Jaeger binary not found. Hint: run `eppkit bootstrap` (builds it once with Go).")
            launcher = ProcessLauncher(binary)
        self.launcher = launcher
        alloc = ports or PortAllocator()
        self.ports = JaegerPorts(alloc.port(), alloc.port(), alloc.port(), alloc.port(), alloc.port())
        self.max_traces = max_traces
        self.process: Component | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.query_http}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.ports.otlp_grpc}"

    def render_config(self) -> Path:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(OBSERVABILITY)),
                                 undefined=jinja2.StrictUndefined)
        text = env.get_template("jaeger.yaml.j2").render(
            host="127.0.0.1", otlp_grpc_port=self.ports.otlp_grpc, otlp_http_port=self.ports.otlp_http,
            query_http_port=self.ports.query_http, query_grpc_port=self.ports.query_grpc,
            health_port=self.ports.health, max_traces=self.max_traces,
        )
        path = self.run_dir / "jaeger.yaml"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def start(self) -> "Jaeger":
        config = self.render_config()
        self.process = self.launcher.make("jaeger", ["--config", str(config)], self.run_dir / "jaeger.log",
                                          mounts=[config])
        self.process.start()
        # Health says the collector is up; the query API answering says traces can be read.
        self.process.wait_ready(HttpReady(f"http://127.0.0.1:{self.ports.health}/status"),
                                hint="Jaeger's health endpoint never answered; is another Jaeger holding the ports?")
        self.process.wait_ready(HttpReady(f"{self.api_url}/api/services"))
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> "Jaeger":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
