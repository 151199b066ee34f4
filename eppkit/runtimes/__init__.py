"""The runtimes: how a testbed's components run. Each is one module that registers a provider
(:class:`~eppkit.runtimes.registry.Runtime`: whether it can run here, what it builds and sweeps first, the launcher it
hands each testbed, what a session left of it): the kit's are modules of this package (``local``, ``docker``,
``kubernetes``); an outside package adds one as an entry point of the group ``eppkit.runtimes``, loaded as every
other extension is (:func:`eppkit.core.registry.load_members`). The :class:`~eppkit.runtimes.testbed.Testbed` is one,
handed the launcher. One topology in, the same handles out on every runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.core.registry import load_members
from eppkit.runtimes import registry
from eppkit.runtimes.registry import Capabilities, ClusterRuntime, Runtime, RuntimeMissing, all_runtimes, get, names
from eppkit.topology import Topology

if TYPE_CHECKING:
    from eppkit.modes import Setup

__all__ = ["ALL_RUNTIMES", "RUNTIMES", "Capabilities", "ClusterRuntime", "Runtime", "RuntimeMissing", "all_runtimes",
           "create", "create_jaeger", "get", "launcher", "names"]

# Every module of this package that is not a runtime: the testbed and what it uses, the shared recipes.
_NOT_RUNTIMES = ("common", "first_use", "images", "launching", "pool", "registry", "testbed", "vllm_servers")
load_members(__name__, __path__, group="runtimes", skip=_NOT_RUNTIMES, order=("local", "docker", "kubernetes"))

RUNTIMES = names()  # every runtime: the kit's first (the first is the default)
# What "all" means (--eppkit-runtime all): the runtimes that say they are one of it (not a cluster, which is named).
ALL_RUNTIMES = tuple(r.name for r in all_runtimes() if r.capabilities.in_all)


def launcher(runtime: str, cluster=None, **options):
    """The launcher of ``runtime`` (on ``cluster``, when it runs on one: :func:`get`; ``options``: its own, e.g.
    docker's ``image_set``)."""
    return registry.get(runtime, cluster).launcher(**options)


def create(topology: Topology | Setup, runtime: str = RUNTIMES[0], *, cluster=None,
           launcher_options: dict | None = None, **kwargs):
    """A not-yet-started testbed of ``topology`` (or of one checked already: :func:`eppkit.modes.check`) for
    ``runtime`` (on ``cluster``: the handle made where the user named one); use it in a ``with`` or call
    start()/stop(). ``kwargs``: the :class:`~eppkit.runtimes.testbed.Testbed`'s (a shared ``jaeger``, ``run_dir``,
    ...)."""
    from eppkit.runtimes.testbed import Testbed

    return Testbed(topology, launcher(runtime, cluster, **(launcher_options or {})), **kwargs)


def create_jaeger(runtime: str, run_dir, *, cluster=None, launcher_options: dict | None = None, **kwargs):
    """A not-yet-started Jaeger for ``runtime`` (a process, a container, a Pod; on ``cluster`` as :func:`create`),
    e.g. one shared by a session; what the runtime holds for it (a namespace) goes when it stops, as a testbed's does.
    ``launcher_options``: what the runtime's ``prepare`` gave (an image set)."""
    held = launcher(runtime, cluster, **(launcher_options or {}))
    return held.jaeger(run_dir, **kwargs).after_stop(lambda: held.release(run_dir))
