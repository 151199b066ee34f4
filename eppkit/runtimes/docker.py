"""The docker runtime: every component of the testbed in its own container.

Same topology in, same handles out: :class:`DockerLauncher` is what it hands the
:class:`~eppkit.runtimes.testbed.Testbed`, whose components are then
:class:`~eppkit.components.container.ManagedContainer` s. Containers use host
networking and bind 127.0.0.1 on the ports the testbed picked, so URLs, rendered configs and
readiness checks are the local runtime's. Files a component reads (envoy.yaml, jaeger.yaml,
a dynamic module's .so, ...) are bind-mounted read-only at the same absolute path, so no
config is rewritten.

Images come from :mod:`eppkit.runtimes.images` (pulled when a registry answers, built from local
artifacts when not). Start order and stop order are the testbed's, as on every runtime. The Kubernetes control plane of
an EPP that watches an InferencePool runs as processes of this host on both runtimes; the EPP's container
reads the kubeconfig in the run folder and reaches the API server on 127.0.0.1 (host networking).
"""

from __future__ import annotations

from pathlib import Path

from eppkit.components.jaeger import Jaeger
from eppkit.components.launchers import ContainerLauncher
from eppkit.components.ports import PortAllocator
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import common, images
from eppkit.runtimes.registry import Capabilities, register

CONTAINERS = "eppkit.components.container"  # what its components are: imported when it makes the first


def jaeger_container(run_dir: Path, image: str | None = None, ports: PortAllocator | None = None,
                     max_traces: int = 200_000) -> Jaeger:
    """Jaeger in a container (the image from :mod:`eppkit.runtimes.images` unless given); not yet started."""
    launcher = ContainerLauncher(image or images.ensure(common.progress).jaeger,
                                 labels={"eppkit.testbed": Path(run_dir).name})
    return Jaeger(run_dir, launcher, ports=ports, max_traces=max_traces)


class DockerLauncher:
    """Each component in a container of the image set (built or found on first use; see the module docstring)."""

    runtime = "docker"
    pod_addresses = staticmethod(common.loopback_pods)
    pool_home = staticmethod(common.no_pool_home)
    release = staticmethod(common.nothing_held)

    def __init__(self, image_set: images.ImageSet | None = None) -> None:
        self._images = common.ImageSource(image_set)

    @staticmethod
    def _labels(run_dir: Path) -> dict[str, str]:
        return {"eppkit.testbed": run_dir.name}

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, image: str | None = None, **kwargs) -> Jaeger:
        return jaeger_container(run_dir, image=image or self._images.images().jaeger, ports=ports, **kwargs)

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]):
        if spec.on_host:  # a program of yours, a real vLLM: its environment, not the kit's image
            return common.host_service(spec, env, run_dir, extra_args)
        from eppkit.components.container import ManagedContainer

        image = spec.image or self._images.images().services  # a program of yours in its own image, else the kit's
        return common.service_in_image(spec, env, run_dir, extra_args, lambda name, argv, log: ManagedContainer(
            name, image, argv, log, extra_labels=self._labels(run_dir)))

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        # The host's Envoy (the testbed validated the config with it) is the image's Envoy, of the same version.
        # Whatever the config or the environment names on this host (a dynamic module's .so,
        # a Lua file, its search path) is shared read-only at the same path.
        text = config_path.read_text() + "\n" + "\n".join(env.values())
        mounts = [run_dir, *common.host_paths(text, skip_under=(run_dir,))]
        launcher = ContainerLauncher(self._images.envoy_image(binary), entrypoint=common.ENVOY_ENTRYPOINT,
                                     labels=self._labels(run_dir))
        return common.envoy_in_image(launcher, config_path, run_dir, admin_port, env, mounts)


class DockerRuntime:
    """Containers of a Docker engine of this host, from the kit's images (built locally, no registry needed)."""

    name, order = "docker", 10
    capabilities = Capabilities(builds=("images",))
    available = staticmethod(common.engine_available)

    def sweep(self) -> str:
        """Containers of earlier sessions that died before cleaning up."""
        from eppkit.components import container

        swept = container.sweep()
        return f"removed {len(swept)} orphaned eppkit container(s): {', '.join(swept)}" if swept else ""

    prepare = staticmethod(common.prepare_images)

    def launcher(self, image_set: images.ImageSet | None = None) -> DockerLauncher:
        return DockerLauncher(image_set)

    def leftovers(self) -> str:
        return common.session_leftovers(CONTAINERS, "containers", lambda c: c.name)

    def workers_leftovers(self, tag: str) -> str:
        from eppkit.components import container

        try:
            removed = container.remove_workers(tag)
        except Exception:  # noqa: BLE001  (no engine answers: no container can be there)
            removed = []
        if not removed:
            return ""
        return "containers of this run's workers still there at its end (now removed): " + ", ".join(removed)

    def reaches_this_host(self) -> bool:
        return True  # host networking


register(DockerRuntime())
