"""The local runtime: every component a child process of this host on 127.0.0.1 (free ports, one run folder).

:class:`LocalLauncher` is what it hands the :class:`~eppkit.runtimes.testbed.Testbed`: how Jaeger, a service and
Envoy run as processes. The start and stop order, the handles and the pool are the testbed's.
"""

from __future__ import annotations

from pathlib import Path

from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.runtimes import common
from eppkit.runtimes.registry import Capabilities, RuntimeMissing, register


class LocalLauncher:
    runtime = "local"
    service = staticmethod(common.host_service)
    envoy = staticmethod(common.host_envoy)
    pod_addresses = staticmethod(common.loopback_pods)
    pool_home = staticmethod(common.no_pool_home)
    release = staticmethod(common.nothing_held)

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, **kwargs) -> Jaeger:
        return Jaeger(run_dir, ports=ports, **kwargs)


class LocalRuntime:
    """Processes of this host: always available; Jaeger's binary is what a session needs first."""

    name, order, capabilities = "local", 0, Capabilities()
    leftovers = workers_leftovers = staticmethod(common.nothing_left)  # the leak check's look at processes finds them

    def available(self) -> tuple[bool, str]:
        return True, "this host"

    def sweep(self) -> str:
        return ""  # an orphaned process is the leak check's (its session tag)

    def prepare(self, progress) -> dict:
        from eppkit.builds import jaeger as jaeger_build

        if jaeger_build.find() is None:
            raise RuntimeMissing("Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
        return {}

    def launcher(self) -> LocalLauncher:
        return LocalLauncher()

    def reaches_this_host(self) -> bool:
        return True


register(LocalRuntime())
