"""What a runtime hands the testbed: how each of its components runs (a process, a container, a pod), where a pool's
pods are and where its InferencePool lives, and what it holds for the testbed until it stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from eppkit.components.base import Component
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec


class Launcher(Protocol):
    """How a runtime runs a testbed's components; each call returns one not yet started. The plain answers of a
    runtime that is no cluster are in :mod:`eppkit.runtimes.common` (``loopback_pods``, ``no_pool_home``,
    ``nothing_held``)."""

    runtime: str  # its runtime's name: "local", "docker"

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

    def pod_addresses(self, run_dir: Path) -> Any:
        """Where the pods of the testbed's pool are (``address``, ``check``, ``shared_port``, ``learned``): loopback
        addresses (:data:`eppkit.components.inference_pool.LOOPBACK_PODS`), or the runtime's pod network."""
        ...

    def pool_home(self, run_dir: Path) -> Any:
        """Where the testbed's InferencePool lives when the runtime is a cluster: (its API server's plane, the
        testbed's namespace); None: in the session's control plane (or the testbed's own)."""
        ...

    def release(self, run_dir: Path) -> None:
        """The testbed stopped: what the runtime held for it (a namespace, a block of addresses) goes."""
        ...
