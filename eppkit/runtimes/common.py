"""What the runtimes share, so that none imports another (as kind's providers share a common package): a program of
this host, a program in an image (a container, a Pod) with the host paths it reads, the image set, Envoy in an image,
and the providers' plain answers (a loopback pool, nothing held, a session's leftovers).

Each runtime module (:mod:`eppkit.runtimes.local`, :mod:`eppkit.runtimes.docker`, :mod:`eppkit.runtimes.kubernetes`,
or an outside package's) imports this module and :mod:`eppkit.runtimes.registry`, never another runtime. What a
runtime's components are (a container, a Pod) is imported when it first makes one, so that the leak check can tell
whether a runtime ran in this process (:func:`session_leftovers`).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path

from eppkit.components.inference_pool import LOOPBACK_PODS, LoopbackPods
from eppkit.components.launchers import ProcessLauncher
from eppkit.components.process import ManagedProcess, service_argv
from eppkit.components.readiness import LogLineReady
from eppkit.core.progress import printer
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import images
from eppkit.runtimes.registry import RuntimeMissing

ENVOY_ENTRYPOINT = ["/usr/local/bin/envoy"]  # the same path in the official image and in ours
# Never bind-mounted even when a config names them.
_SYSTEM_DIRS = {"dev", "proc", "sys", "etc", "usr", "bin", "sbin", "lib", "lib64", "boot", "run", "var"}
_PATH_RE = re.compile(r"(?<![\w.:/-])(/[\w.@%+=,~-]+(?:/[\w.@%+=,~-]+)+)")


progress = printer("images")  # what building or finding the images says


# -- the plain answers of a runtime whose pool's pods are loopback addresses and that holds nothing per testbed --
def loopback_pods(run_dir: Path) -> LoopbackPods:
    """Where a pool's pods are on a runtime of this host's network: loopback addresses, one per pod."""
    return LOOPBACK_PODS


def no_pool_home(run_dir: Path) -> None:
    """A runtime that is no cluster: the testbed's pool lives in the session's control plane (or its own)."""


def nothing_held(run_dir: Path) -> None:
    """A runtime that holds nothing for a testbed once its components stopped."""


def nothing_left(*tag: str) -> str:
    """A runtime whose components are this host's processes (the leak check's look at processes finds them), or
    whose own watchdog removes what a dead process left (a cluster's namespaces): nothing else to look for."""
    return ""


def session_leftovers(module: str, what: str, name: Callable[[object], str]) -> str:
    """The leak check's look at one kind of component (``module``: its registry of live ones and its session's
    leftovers, ``live()`` and ``remove_session()``), if any ran in this process: each stopped or removed now; a line
    saying what they were ('' when none)."""
    if module not in sys.modules:  # none was ever made here
        return ""
    kind = importlib.import_module(module)
    leaked = kind.live()
    for item in leaked:
        item.stop(grace_s=1)
    try:
        strays = kind.remove_session()
    except Exception:  # noqa: BLE001  (nothing answers, its tests skipped: nothing can be there)
        strays = []
    if not (leaked or strays):
        return ""
    return f"eppkit {what} still there at session end (now removed): " + ", ".join([name(i) for i in leaked] + strays)


def prepare_images(progress) -> dict:
    """A container runtime's first need: the kit's images, built or found now; its launcher's ``image_set``."""
    try:
        return {"image_set": images.ensure(progress)}
    except images.ImageError as exc:
        raise RuntimeMissing(f"docker images unavailable: {exc}") from exc


def engine_available() -> tuple[bool, str]:
    """(True, version) when a Docker engine answers; (False, how to get one) when not."""
    from eppkit.components.container import engine_version

    version = engine_version()
    if version is None:
        return False, ("no Docker engine answers (docker.sock). Install Docker "
                       "(https://docs.docker.com/engine/install/, or `apt-get install docker.io` on Debian) and start "
                       "it, or pass --runtime local")
    return True, version


# -- a program of this host --
def host_service(spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]) -> ManagedProcess:
    """One service as a process of this host: its command (or the kit's module), its environment, the run folder as
    its working folder."""
    if spec.image:
        raise ValueError(f"{spec.name} is an image ({spec.image}): images run on --runtime docker or kubernetes; "
                         "on the local runtime give its command instead")
    argv = spec.argv or service_argv(spec.module, spec.port, spec.args, host=spec.host)
    proc = ManagedProcess(spec.name, [*argv, *extra_args], run_dir / f"{spec.name}.log")
    return proc.with_env(**{**env, **spec.env}).with_cwd(run_dir)


def host_envoy(binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
               env: dict[str, str], wrapper: list[str] | None = None) -> envoy_process.Envoy:
    """Envoy as a process of this host (``wrapper``: what runs it, e.g. ``["nice", "-n", "5"]``)."""
    return envoy_process.Envoy(config_path, run_dir / "envoy.log", admin_port,
                               ProcessLauncher(binary.path, wrapper=wrapper or ()), env=env)


# -- a program in an image (a container, a Pod) --
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


def envoy_in_image(launcher, config_path: Path, run_dir: Path, admin_port: int, env: dict[str, str],
                   mounts: list[Path]) -> envoy_process.Envoy:
    """Envoy run by ``launcher`` from an image (a container's, a Pod's), ``mounts`` shared at the same paths."""
    # At info level the log holds Envoy's "starting main dispatch loop", read as a second sign.
    return envoy_process.Envoy(config_path, run_dir / "envoy.log", admin_port, launcher, env=env,
                               log_level="info", mounts=mounts, ready=LogLineReady("starting main dispatch loop"))


class ImageSource:
    """The kit's images (Envoy, Jaeger, its services), built or found on first use, and another Envoy version's."""

    def __init__(self, image_set: images.ImageSet | None = None) -> None:
        self.image_set = image_set

    def images(self) -> images.ImageSet:
        if self.image_set is None:
            self.image_set = images.ensure(progress)
        return self.image_set

    def envoy_image(self, binary: envoy_versions.EnvoyBinary) -> str:
        """The image set's Envoy (the one installed with eppkit), or another version's image (images.envoy_image)."""
        if binary.path in (envoy_process.find(), images.envoy_binary()):
            return self.images().envoy
        return images.envoy_image(binary, progress)
