"""Jaeger v2 on loopback with memory storage: the binary built by :mod:`eppkit.builds.jaeger`, or an image's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import jinja2

from eppkit.builds.jaeger import find
from eppkit.components.base import Component
from eppkit.components.launchers import Launcher, ProcessLauncher
from eppkit.components.ports import PortAllocator
from eppkit.components.readiness import HttpReady


@dataclass
class JaegerPorts:
    otlp_grpc: int
    otlp_http: int
    query_http: int
    query_grpc: int
    health: int


class Jaeger:
    """A Jaeger all-in-one on loopback with memory storage, in a ``with``: a process of this host
    (default: the cached binary) or, with a :class:`~eppkit.components.launchers.ContainerLauncher`, a container."""

    def __init__(self, run_dir: Path, launcher: Launcher | None = None, ports: PortAllocator | None = None,
                 max_traces: int = 200_000, pods_host: str | None = None):
        self.run_dir = Path(run_dir)
        if launcher is None:
            binary = find()
            if binary is None:
                raise FileNotFoundError("Jaeger binary not found. Hint: run `eppkit bootstrap` (builds it once with Go).")
            launcher = ProcessLauncher(binary)
        self.launcher = launcher
        # Its own allocator's leases are given back at stop(); a testbed's allocator is the testbed's to release.
        self._own_ports = None if ports is not None else PortAllocator()
        alloc = ports or self._own_ports
        self.ports = JaegerPorts(alloc.port(), alloc.port(), alloc.port(), alloc.port(), alloc.port())
        self.api_url = f"http://127.0.0.1:{self.ports.query_http}"  # its query API (traces read back)
        self.otlp_grpc_endpoint = f"127.0.0.1:{self.ports.otlp_grpc}"  # where services send their spans
        self.max_traces = max_traces
        self.pods_host = pods_host  # also takes spans there (the kubernetes runtime's pod network: cluster/podnet)
        self.process: Component | None = None
        self._after_stop: list[Callable[[], object]] = []  # what goes with it (what a runtime held for it)

    def after_stop(self, release: Callable[[], object]) -> "Jaeger":
        """``release`` called once it stopped (or failed to start in a ``with``): what was held for it goes too."""
        self._after_stop.append(release)
        return self

    def render_config(self) -> Path:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(files(__package__))),
                                 undefined=jinja2.StrictUndefined)
        text = env.get_template("jaeger.yaml.j2").render(
            host="127.0.0.1", otlp_grpc_port=self.ports.otlp_grpc, otlp_http_port=self.ports.otlp_http,
            query_http_port=self.ports.query_http, query_grpc_port=self.ports.query_grpc,
            health_port=self.ports.health, max_traces=self.max_traces, pods_host=self.pods_host,
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
        try:
            if self.process is not None:
                self.process.stop()
        finally:
            if self._own_ports is not None:
                self._own_ports.release()
            while self._after_stop:
                self._after_stop.pop()()

    def __enter__(self) -> "Jaeger":
        try:
            return self.start()
        except BaseException:  # a Jaeger that never got ready: what did start (a process, a Pod) stops
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
