"""The local runtime: every component a child process of this host on 127.0.0.1 (free ports, one run folder).

:class:`LocalLauncher` is what it hands the :class:`~eppkit.runtimes.testbed.Testbed`: how Jaeger, a service and
Envoy run as processes. The start and stop order, the handles and the pool are the testbed's.
"""

from __future__ import annotations

from pathlib import Path

from eppkit.components.jaeger import Jaeger
from eppkit.components.launchers import ProcessLauncher
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess, service_argv
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec


class LocalLauncher:
    runtime = "local"

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, **kwargs) -> Jaeger:
        return Jaeger(run_dir, ports=ports, **kwargs)

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]) -> ManagedProcess:
        if spec.image:
            raise ValueError(f"{spec.name} is an image ({spec.image}): images run on --runtime docker or kubernetes; "
                             "on the local runtime give its command instead")
        argv = spec.argv or service_argv(spec.module, spec.port, spec.args, host=spec.host)
        proc = ManagedProcess(spec.name, [*argv, *extra_args], run_dir / f"{spec.name}.log")
        return proc.with_env(**{**env, **spec.env}).with_cwd(run_dir)

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        return envoy_process.Envoy(config_path, run_dir / "envoy.log", admin_port, ProcessLauncher(binary.path),
                                   env=env)


def launcher() -> LocalLauncher:
    return LocalLauncher()
