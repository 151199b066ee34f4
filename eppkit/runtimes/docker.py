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

import re
import sys
from pathlib import Path

from eppkit.components.container import ManagedContainer, engine_version
from eppkit.components.jaeger import Jaeger
from eppkit.components.launchers import ContainerLauncher
from eppkit.components.ports import PortAllocator
from eppkit.components.process import service_argv
from eppkit.components.readiness import LogLineReady
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import images
from eppkit.runtimes.local import LocalLauncher

ENVOY_ENTRYPOINT = ["/usr/local/bin/envoy"]  # the same path in the official image and in ours
# Never bind-mounted even when a config names them.
_SYSTEM_DIRS = {"dev", "proc", "sys", "etc", "usr", "bin", "sbin", "lib", "lib64", "boot", "run", "var"}
_PATH_RE = re.compile(r"(?<![\w.:/-])(/[\w.@%+=,~-]+(?:/[\w.@%+=,~-]+)+)")


def available() -> tuple[bool, str]:
    """(True, version) when a Docker engine answers; (False, how to get one) when not."""
    version = engine_version()
    if version is None:
        return False, ("no Docker engine answers (docker.sock). Install Docker (https://docs.docker.com/engine/install/, "
                       "or `apt-get install docker.io` on Debian) and start it, or pass --runtime local")
    return True, version


def progress(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def _is_system(path: Path) -> bool:
    """Inside the image's own folders (/dev, /etc, /usr, ...): never shadowed by a host mount."""
    return len(path.parts) < 2 or path.parts[1] in _SYSTEM_DIRS


def host_paths(text: str, *, skip_under: tuple[Path, ...] = ()) -> list[Path]:
    """Absolute paths named in ``text`` that exist on this host (files or folders), outside ``skip_under``."""
    found: dict[str, Path] = {}
    for match in _PATH_RE.finditer(text):
        path = Path(match.group(1))
        if _is_system(path) or not path.exists() or any(path == s or s in path.parents for s in skip_under):
            continue
        found[str(path)] = path
    return list(found.values())


def mount_for_arg(value: str) -> Path | None:
    """The host path to share for one service argument that is an absolute path, or None.

    An existing path is shared as is; one that does not exist yet (a cache folder the
    service will create) is shared through its parent, so every container sees the same files.
    """
    if not value.startswith("/"):
        return None
    path = Path(value)
    if _is_system(path) or len(path.parts) <= 2:  # never "/" or a top-level folder such as /tmp
        return None
    if path.exists():
        return path
    parent = path.parent
    if parent.exists() and len(parent.parts) > 2:  # never "/" or a top-level folder such as /tmp
        return parent
    return None


def jaeger_container(run_dir: Path, image: str | None = None, ports: PortAllocator | None = None,
                     max_traces: int = 200_000) -> Jaeger:
    """Jaeger in a container (the image from :mod:`eppkit.runtimes.images` unless given); not yet started."""
    launcher = ContainerLauncher(image or images.ensure(progress).jaeger, labels={"eppkit.testbed": Path(run_dir).name})
    return Jaeger(run_dir, launcher, ports=ports, max_traces=max_traces)


def service_in_image(spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str], make):
    """One kit service in the services image, or a program of yours in its own (``spec.image``; ``make(name, argv,
    log_path)``: a container, a pod), as a local process would run: its environment, the run folder as its working
    folder."""
    argv = spec.argv or service_argv(spec.module, spec.port, spec.args, python="python", host=spec.host)
    if spec.argv and spec.argv[0] == sys.executable and not spec.image:
        # A program of its own run by the kit's Python (the kit's EPP as an external EPP): this
        # host's virtualenv is not in the image, whose Python has the same packages.
        argv = ["python", *spec.argv[1:]]
    made = make(spec.name, [*argv, *extra_args], run_dir / f"{spec.name}.log").with_env(**{**env, **spec.env})
    # The run folder is shared read-write (services may write caches there), and so is any
    # absolute path among the arguments (e.g. an encoder cache shared by E and P).
    made.with_mount(run_dir, "rw").with_cwd(run_dir)  # as a local process: relative paths work
    for arg in map(str, spec.argv or spec.args):
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        path = mount_for_arg(value)
        if path is not None:
            made.with_mount(path, "rw")
    return made


class DockerLauncher:
    """Each component in a container of the image set (built or found on first use; see the module docstring)."""

    runtime = "docker"

    def __init__(self, image_set: images.ImageSet | None = None) -> None:
        self.image_set = image_set
        self._host = LocalLauncher()  # for what runs on the host on every runtime

    @staticmethod
    def _labels(run_dir: Path) -> dict[str, str]:
        return {"eppkit.testbed": run_dir.name}

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, image: str | None = None, **kwargs) -> Jaeger:
        return jaeger_container(run_dir, image=image or self.images().jaeger, ports=ports, **kwargs)

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]):
        if spec.on_host:  # a program of yours, a real vLLM: its environment, not the kit's image
            return self._host.service(spec, env, run_dir, extra_args)
        image = spec.image or self.images().services  # a program of yours in its own image, else the kit's
        return service_in_image(spec, env, run_dir, extra_args, lambda name, argv, log: ManagedContainer(
            name, image, argv, log, extra_labels=self._labels(run_dir)))

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        # The host's Envoy (the testbed validated the config with it) is the image's Envoy, of the same version.
        # Whatever the config or the environment names on this host (a dynamic module's .so,
        # a Lua file, its search path) is shared read-only at the same path.
        text = config_path.read_text() + "\n" + "\n".join(env.values())
        mounts = [run_dir, *host_paths(text, skip_under=(run_dir,))]
        launcher = ContainerLauncher(self.envoy_image(binary), entrypoint=ENVOY_ENTRYPOINT,
                                     labels=self._labels(run_dir))
        # At info level the container's log holds Envoy's "starting main dispatch loop", read as a second sign.
        return envoy_process.Envoy(config_path, run_dir / "envoy.log", admin_port, launcher, env=env,
                                   log_level="info", mounts=mounts, ready=LogLineReady("starting main dispatch loop"))

    def envoy_image(self, binary: envoy_versions.EnvoyBinary) -> str:
        """The image set's Envoy (the one installed with eppkit), or another version's image (images.envoy_image)."""
        if binary.path in (envoy_process.find(), images.envoy_binary()):
            return self.images().envoy
        return images.envoy_image(binary, progress)

    def images(self) -> images.ImageSet:
        if self.image_set is None:
            self.image_set = images.ensure(progress)
        return self.image_set


def launcher(image_set: images.ImageSet | None = None) -> DockerLauncher:
    return DockerLauncher(image_set)
