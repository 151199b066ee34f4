"""The cluster the kubernetes runtime runs on, as one handle (:class:`Cluster`), made once where the user names it
and passed down: the kit's one-node cluster (:class:`KitCluster`, ``eppkit cluster up``) or a cluster of your own by
kubeconfig (:class:`eppkit.cluster.remote.OwnCluster`: ``--kubeconfig``, ``pytest --eppkit-kubeconfig``, or a
launcher's ``kubeconfig=`` / ``cluster=`` option in Python). It owns its lightkube client (built once), its
kubeconfig (parsed once), the node its Pods run on and how each is reached (:class:`~eppkit.cluster.pod.PodSite`),
the images its Pods run, its rights, and the home of a testbed's InferencePool.

:func:`named` makes one where the user names it (the CLI and the pytest plugin, from ``--kubeconfig`` and
``--image-registry``; each pytest-xdist worker makes its own from the same options), and the front end hands it down:
to the runtime (:func:`eppkit.runtimes.get`), its launcher, the launcher's Pods and the pool's home. A process this one
starts (a Pod's watchdog) is given it in its spawn environment (:meth:`Cluster.env`) and makes it again from its
settings (``EPPKIT_KUBECONFIG``, ``EPPKIT_IMAGE_REGISTRY``: :mod:`eppkit.core.settings`; a user may set them too).
Nothing writes it into this process's environment, and there is no process-wide current cluster.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eppkit.cluster import namespaces, podnet
from eppkit.cluster.remote import KUBECONFIG_ENV, NODE_ENV, REGISTRY_ENV, OwnCluster
from eppkit.core.settings import settings

if TYPE_CHECKING:
    from eppkit.cluster.pod import PodSite
    from eppkit.components.kubeapi import ApiServer

__all__ = ["KUBECONFIG_ENV", "NODE_ENV", "REGISTRY_ENV", "Cluster", "KitCluster", "OwnCluster", "named"]


class Cluster(Protocol):
    """What the kubernetes runtime asks of the cluster it runs on (module docstring)."""

    kubeconfig: str  # the kubeconfig the kit reaches it by

    def client(self) -> Any:
        """Its lightkube client, one per process (never closed by the caller)."""
        ...

    def available(self) -> tuple[bool, str]:
        """(True, its API server) when it answers and may be used; (False, what is wrong and what to do)."""
        ...

    def sweep(self) -> list[str]:
        """The namespaces of sessions that died without stopping their testbeds, removed the first time asked."""
        ...

    def env(self) -> dict[str, str]:
        """What carries it to a process this one starts."""
        ...

    def image(self, tag: str, kits: bool = True) -> str:
        """What a Pod runs for ``tag`` (``kits``: one of the kit's images, else yours), made available to its
        node."""
        ...

    def site(self, ports: Sequence[int], helper_image: Callable[[], str]) -> PodSite:
        """How a new Pod of it is placed and reached (``ports``: those the kit reaches it on; ``helper_image``: what
        puts a large file together, where one is needed)."""
        ...

    def node_name(self) -> str:
        ...

    def reaches_this_host(self) -> bool:
        """Its Pods reach this host's programs on 127.0.0.1 (a program of yours, a real vLLM, compare's floors)."""
        ...

    def pods_host(self) -> str | None:
        """Where a Pod of its pod network reaches its node's host network (None: nowhere)."""
        ...

    def api_server_for_pods(self) -> str | None:
        """Its API server's address for an in-cluster client on the host network (None: the ``kubernetes`` Service
        its kubelet names)."""
        ...

    def pool_home(self) -> ApiServer:
        """Its API server as the home of a testbed's InferencePool (ClusterError when its user may not)."""
        ...

    def pod_addresses(self, namespace: str) -> Any:
        """Where a testbed's pool Pods are (``address``, ``check``, ``shared_port``, ``learned``)."""
        ...

    def release_addresses(self, addresses: Any) -> None:
        """A testbed stopped: its :meth:`pod_addresses` given back."""
        ...

    def program_image(self, argv: Sequence[str], image: str | None) -> Path | None:
        """The program of this host a Pod of the kit's image would run (its first argument) when its node cannot
        be given this host's files: it goes in an image of its own. Else None."""
        ...

    def pod_paths(self, config: Path, run_dir: Path, named: list[Path], live: Path) -> tuple[list[Path], set[Path]]:
        """The host paths a program given ``config`` (in ``run_dir``, naming ``named``) is given, and which of them
        are live folders (``live``: one this host keeps rewriting)."""
        ...

    def pod_kubeconfig(self, paths: Sequence[str]) -> list[str]:
        """Of ``paths`` (kubeconfigs a service is given), those holding credentials no Pod of it may be given."""
        ...


class KitCluster:
    """The kit's one-node cluster (:mod:`eppkit.cluster`): its node is this machine, its Pods see this host's files
    (hostPath), its images imported into its containerd, its pod network the kit's bridge."""

    def __init__(self) -> None:
        from eppkit.cluster import layout

        self.layout = layout()
        self.kubeconfig = str(self.layout.kubeconfig)
        self._client = None
        self._lock = threading.Lock()
        self._imported: set[str] = set()  # on the node already: no `ctr images ls` per component
        self._swept = False

    def __repr__(self) -> str:
        return "KitCluster()"

    def client(self):
        with self._lock:
            if self._client is None:
                from eppkit.cluster import running
                from eppkit.components import kubeapi

                if running() is None:
                    raise RuntimeError("the one-node cluster is not running: `eppkit cluster up` starts it")
                self._client = kubeapi.client(kubeapi.load(self.kubeconfig))
            return self._client

    def available(self) -> tuple[bool, str]:
        from eppkit import cluster

        state = cluster.running()
        if state is not None:
            return True, state["server"]
        lacks = cluster.missing()
        if lacks:
            return False, str(cluster.missing_error(lacks))
        return False, "the one-node Kubernetes cluster is not running: `eppkit cluster up` starts it (a few seconds)"

    def sweep(self) -> list[str]:
        if self._swept:
            return []
        self._swept = True
        gone = namespaces.sweep(self.client())
        podnet.Blocks(self.layout.blocks).release_owned(set(gone))  # their pods' addresses too
        return gone

    def env(self) -> dict[str, str]:
        """No cluster of your own (one a parent named is not this one's)."""
        return {KUBECONFIG_ENV: "", REGISTRY_ENV: ""}

    def image(self, tag: str, kits: bool = True) -> str:
        """Imported from docker into its node once (never pulled)."""
        if tag not in self._imported:
            from eppkit.cluster import images

            images.ensure_from_docker(self.layout.containerd_socket, tag, self.layout.home / "images.lock")
            self._imported.add(tag)
        return tag

    def site(self, ports: Sequence[int], helper_image: Callable[[], str]) -> PodSite:
        from eppkit.cluster.nodepod import NodeSite

        return NodeSite(self)

    def node_name(self) -> str:
        from eppkit.cluster.configs import NODE

        return NODE

    def reaches_this_host(self) -> bool:
        return True

    def pods_host(self) -> str:
        return podnet.HOST

    def api_server_for_pods(self) -> str:
        from eppkit.cluster import running

        return running()["server"]

    def pool_home(self) -> ApiServer:
        from eppkit.components.controlplane import ControlPlane

        return ControlPlane.attached(self.layout.plane)

    def pod_addresses(self, namespace: str) -> podnet.BlockPods:
        """The testbed's block of the pod network, reserved now."""
        return podnet.BlockPods(podnet.Blocks(self.layout.blocks).reserve(namespace))

    def release_addresses(self, addresses: podnet.BlockPods) -> None:
        podnet.Blocks(self.layout.blocks).release(addresses.block)

    def program_image(self, argv: Sequence[str], image: str | None) -> None:
        """None: its node mounts the program's file."""

    def pod_paths(self, config: Path, run_dir: Path, named: list[Path], live: Path) -> tuple[list[Path], set[Path]]:
        """The run folder whole (a live folder in it is read as the host rewrites it), and what else is named."""
        return [run_dir, *(p for p in named if p != run_dir and run_dir not in p.parents)], set()

    def pod_kubeconfig(self, paths: Sequence[str]) -> list[str]:
        """None: a Pod reads the host's file where it is."""
        return []


def named(kubeconfig: str | os.PathLike | None = None, registry: str | None = None) -> Cluster:
    """The cluster the user names: a cluster of your own by ``kubeconfig`` (its Pods pulling the kit's images from
    ``registry``), each by default what the settings say (``EPPKIT_KUBECONFIG``, ``EPPKIT_IMAGE_REGISTRY``); else
    the kit's one-node cluster. ValueError when the file is not there."""
    kubeconfig = kubeconfig or settings().kubeconfig
    registry = registry or settings().image_registry
    if kubeconfig:
        return OwnCluster(kubeconfig, registry)
    if registry:
        raise ValueError("--image-registry is where a cluster of your own pulls the kit's images from: give "
                         "--kubeconfig too (the kit's one-node cluster imports them)")
    return KitCluster()
