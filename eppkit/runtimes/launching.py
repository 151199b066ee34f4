"""What a runtime hands the testbed: how each of its components runs (a process, a container, a pod)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from eppkit.components.base import Component
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec


class Launcher(Protocol):
    """How a runtime runs a testbed's components; each call returns one not yet started."""

    runtime: str  # its name: "local", "docker"

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None) -> Jaeger:
        """The testbed's own Jaeger (one not shared)."""
        ...

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]) -> Component:
        """One service of the flow or the mode (``extra_args`` after its own: its OTLP endpoint, when it takes it
        as a flag); its working folder and log are in ``run_dir``."""
        ...

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        """Envoy for ``config_path`` (validated by the testbed already)."""
        ...
