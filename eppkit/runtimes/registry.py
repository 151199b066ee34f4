"""The runtime registry: each runtime is one provider (as kind's providers are), one module that registers a
:class:`Runtime`, loaded as every other extension is (:func:`eppkit.core.registry.load_members`; an outside package's
through the entry point group ``eppkit.runtimes``). A provider answers everything the pytest plugin, the leak check,
the CLI and compare ask of a runtime, and hands each testbed a :class:`~eppkit.runtimes.launching.Launcher`: nothing
outside :mod:`eppkit.runtimes` names a runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from eppkit.core.progress import Progress
from eppkit.core.registry import Registry

if TYPE_CHECKING:
    from eppkit.runtimes.launching import Launcher



class RuntimeMissing(RuntimeError):
    """What a runtime needs before its first testbed is not there (an image, a binary); the message says how to get
    it."""


@dataclass(frozen=True)
class Capabilities:
    """What a runtime is, for those who choose or describe it (it says so; nobody tells it by its name)."""

    in_all: bool = True  # one of `--eppkit-runtime all` (False: a runtime named, never implied: a cluster's)
    builds: tuple[str, ...] = ()  # first-use builds every testbed of it runs (eppkit.runtimes.first_use: "images")
    cluster: bool = False  # it runs on a cluster (a ClusterRuntime): --kubeconfig and --image-registry are its options


class Runtime(Protocol):
    """One runtime: whether it can run here, what it builds and sweeps before a session, the launcher it hands each
    testbed, and what a session left of its components at its end."""

    name: str  # what --runtime and --eppkit-runtime call it
    order: int  # position in listings (the first is the default)
    capabilities: Capabilities

    def available(self) -> tuple[bool, str]:
        """(True, what answers: an engine's version, a cluster's API server) or (False, how to get it)."""
        ...

    def sweep(self) -> str:
        """What sessions that died left of its components (containers, namespaces), removed now: a line saying what
        ('' when nothing)."""
        ...

    def prepare(self, progress: Progress) -> dict[str, Any]:
        """Before a session's first testbed: what every testbed of it needs, built or found now (RuntimeMissing when
        it cannot be); the launcher's options that hold it (an image set)."""
        ...

    def launcher(self, **options: Any) -> Launcher:
        """The launcher a testbed (or a session's Jaeger) is handed: how each component runs, what it holds."""
        ...

    def leftovers(self) -> str:
        """This session's components still there at its end, stopped or removed now: a line saying what ('' when
        nothing). Components made in this process only (it never ran: '')."""
        ...

    def workers_leftovers(self, tag: str) -> str:
        """At the end of a pytest-xdist run (test session ``tag``): what its workers (``<tag>/<worker id>``) left of
        its components that their own checks could not see (a worker that died), removed now: a line ('' when
        nothing)."""
        ...

    def reaches_this_host(self) -> bool:
        """Its components reach a program of this host (compare's floors, a program of yours run on the host)."""
        ...


class ClusterRuntime(Runtime, Protocol):
    """A runtime whose capabilities say ``cluster``: the one registered runs on the cluster the settings name (the
    kit's one-node cluster unless ``EPPKIT_KUBECONFIG`` says otherwise); :meth:`on` gives it on another."""

    def on(self, cluster: Any) -> Runtime:
        """This runtime on ``cluster`` (an :class:`eppkit.cluster.handle.Cluster`, made where the user named it)."""
        ...


RUNTIMES: Registry[Runtime] = Registry("runtime")
register, names, all_runtimes = RUNTIMES.register, RUNTIMES.names, RUNTIMES.all


def get(name: str, cluster: Any = None) -> Runtime:
    """The runtime ``name``; with ``cluster`` (the handle made where the user named one), on it when it runs on a
    cluster (its capabilities say so), as it is when it does not."""
    runtime = RUNTIMES.get(name)
    if cluster is None or not runtime.capabilities.cluster:
        return runtime
    clustered: ClusterRuntime = runtime  # type: ignore[assignment]  # its capabilities say it is one
    return clustered.on(cluster)
