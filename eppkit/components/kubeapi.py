"""A Kubernetes API server as the kit talks to it: the one way a lightkube client is built (:func:`client`), and what
an InferencePool's home is (:class:`ApiServer`), whichever API server that is: the control plane the kit starts
(:class:`~eppkit.components.controlplane.ControlPlane`, also the one-node cluster's), or a cluster of your own's
(:class:`eppkit.cluster.remote.OwnPlane`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


def client(config: Any, namespace: str | None = None, *, asynchronous: bool = False):
    """A lightkube client (``asynchronous``: an AsyncClient) of ``config`` (a parsed ``KubeConfig``), the kit's field
    manager, no proxy or CA from the environment."""
    from lightkube import AsyncClient, Client

    kind = AsyncClient if asynchronous else Client
    return kind(config, namespace=namespace, field_manager="eppkit", trust_env=False)


def load(path: str | Path):
    """A kubeconfig file, parsed (a lightkube ``KubeConfig``)."""
    from lightkube import KubeConfig

    return KubeConfig.from_file(str(path))


class ApiServer(Protocol):
    """The API server an InferencePool lives in, as the testbed and the pool ask of it."""

    server: str  # its URL

    def client(self, namespace: str | None = None) -> Any:
        """A new lightkube client (the caller closes it)."""
        ...

    def async_client(self, namespace: str | None = None) -> Any:
        ...

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig of it at ``path``, its context in ``namespace`` (what the testbed's EPP is given)."""
        ...

    def served_crds(self) -> list[str]:
        ...

    def apply_crds(self, files: list[Path]) -> list[str]:
        """The CRDs of ``files``, made where missing and Established; their names."""
        ...
