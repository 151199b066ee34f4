"""A cluster of your own, by kubeconfig (``--kubeconfig FILE``, ``pytest --eppkit-kubeconfig FILE``, or the
environment variable ``EPPKIT_KUBECONFIG``): the kubernetes runtime's testbeds on it instead of the one-node cluster
the kit starts here.

The kit reaches such a cluster through its API server only (:mod:`eppkit.cluster.apipod`): each component a Pod on
the host network of **one node** (the first Ready one, or ``EPPKIT_KUBE_NODE``), all of a testbed's Pods on that
node, binding 127.0.0.1 there on the ports the testbed leased, so rendered configs are the other runtimes'; files
from ConfigMaps; output through ``pods/log``; and, when that node is another machine, each port the kit reaches
(Envoy's listener and admin, Jaeger's query and OTLP, each service's port) forwarded from this host's 127.0.0.1 on
the same number through the API server (:mod:`eppkit.cluster.portforward`), so every URL stays the same. Images
are pulled by the node (``imagePullPolicy: IfNotPresent``, the kit's tags): load them first (``kind load
docker-image``) or push them where the node pulls from.

A mode whose EPP watches an InferencePool keeps its pool in this API server (:class:`Plane`), its Pods on the
cluster's pod network where its network puts them (:class:`LearnedPods`: each mock listens on ``$(POD_IP)``, the
testbed takes the address from the running Pod), its mocks' spans sent to Jaeger at the node's InternalIP
(:func:`node_address`).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

KUBECONFIG_ENV = "EPPKIT_KUBECONFIG"
NODE_ENV = "EPPKIT_KUBE_NODE"
REGISTRY_ENV = "EPPKIT_IMAGE_REGISTRY"


def kubeconfig() -> str | None:
    """The kubeconfig of a cluster of your own, or None (the kit's one-node cluster)."""
    value = os.environ.get(KUBECONFIG_ENV, "").strip()
    return str(Path(value).expanduser()) if value else None


def use(path: str | os.PathLike | None, registry: str | None = None) -> None:
    """From now on (and in every process this one starts), the kubernetes runtime runs on the cluster of
    ``path``, its Pods pulling the kit's images from ``registry``; None leaves each as it is."""
    if path:
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_file():
            raise ValueError(f"--kubeconfig {path}: no such file")
        os.environ[KUBECONFIG_ENV] = str(resolved)
    if registry:
        os.environ[REGISTRY_ENV] = registry.rstrip("/")


def image(tag: str) -> str:
    """What a Pod on a cluster of your own runs for one of the kit's image tags: in the registry given, else as it
    is (loaded into the node)."""
    registry = os.environ.get(REGISTRY_ENV, "").strip().rstrip("/")
    return f"{registry}/{tag}" if registry else tag


@functools.lru_cache(maxsize=4)
def access(path: str):
    from eppkit.cluster.portforward import ApiAccess

    return ApiAccess.from_kubeconfig(path)


class ChosenNode(NamedTuple):
    name: str
    mine: bool  # its addresses are this machine's
    address: str | None  # its InternalIP (None: a loopback one, which no Pod reaches)


_nodes: dict[str, ChosenNode] = {}
_usable: dict[str, str] = {}  # the clusters found usable (available()), and what they are


def node(path: str, client) -> tuple[str, bool]:
    """(the node every Pod of the kit's testbeds on the cluster of ``path`` runs on, whether its addresses are this
    machine's: then its 127.0.0.1 is ours and nothing is forwarded); asked of ``client`` once per process."""
    if path not in _nodes:
        _nodes[path] = _choose_node(path, client)
    return _nodes[path][:2]


def _choose_node(path: str, client) -> ChosenNode:
    from lightkube.resources.core_v1 import Node

    wanted = os.environ.get(NODE_ENV, "").strip()
    nodes = list(client.list(Node))
    ready = [n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
             and not any(t.effect in ("NoSchedule", "NoExecute") for t in (n.spec.taints or []))]
    if wanted:
        chosen = next((n for n in nodes if n.metadata.name == wanted), None)
        if chosen is None:
            raise RuntimeError(f"{NODE_ENV}={wanted}: the cluster of {path} has no such node "
                               f"(it has {', '.join(n.metadata.name for n in nodes) or 'none'})")
    elif ready:
        chosen = ready[0]
    else:
        raise RuntimeError(f"the cluster of {path} has no Ready node without a NoSchedule taint "
                           f"(nodes: {', '.join(n.metadata.name for n in nodes) or 'none'}); name one: {NODE_ENV}=NAME")
    addresses = [a.address for a in (chosen.status.addresses or [])]
    internal = next((a.address for a in (chosen.status.addresses or []) if a.type == "InternalIP"), None)
    return ChosenNode(chosen.metadata.name, any(_is_mine(a) for a in addresses),
                      None if internal is None or ipaddress.ip_address(internal).is_loopback else internal)


def reaches_this_host(path: str, client) -> bool:
    """The Pods of the cluster of ``path`` reach this host's programs on 127.0.0.1 (a command EPP, a real vLLM, a
    floor): its kit's node is this machine, whose loopback its host-network Pods share."""
    return node(path, client)[1]


def node_address(path: str, client) -> str | None:
    """Where a Pod of the cluster's pod network reaches the kit's node's host network (Jaeger's OTLP for a pool's
    Pods): the node's InternalIP; None when that is a loopback address (no Pod reaches it)."""
    node(path, client)
    return _nodes[path].address


def _is_mine(address: str) -> bool:
    """The address is one of this machine's (it can bind it)."""
    try:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except (OSError, ValueError):
        return False


# What the kit does on a cluster of your own, cluster-wide (it makes a namespace per testbed, so no Role made in
# advance can hold these): (verb, resource, subresource); pods/portforward only when the node is another machine.
RIGHTS = (("list", "nodes", ""), ("create", "namespaces", ""), ("delete", "namespaces", ""), ("list", "namespaces", ""),
          ("create", "pods", ""), ("delete", "pods", ""), ("get", "pods", ""), ("list", "pods", ""),
          ("get", "pods", "log"), ("create", "configmaps", ""), ("delete", "configmaps", ""))
FORWARD = ("create", "pods", "portforward")
# What a mode whose EPP watches an InferencePool needs besides: its pool Pods labelled and their readiness gate
# written, the EPP's ServiceAccount bound to a Role of its rules, the pool's CRD read (and made when missing).
POOL_RIGHTS = (("patch", "pods", ""), ("patch", "pods", "status"), ("create", "serviceaccounts", ""),
               ("create", "roles", ""), ("create", "rolebindings", ""), ("create", "inferencepools", ""),
               ("get", "customresourcedefinitions", ""))
POD_IP = "$(POD_IP)"  # a pool Pod's address until it runs: its kubelet puts the Pod's IP there (an env var of it)


def missing_rights(client, rights=RIGHTS) -> list[str]:
    """The rights the kubeconfig's user lacks ("create pods/portforward"), asked of the API server itself
    (SelfSubjectAccessReview, which every authenticated user may ask)."""
    from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
    from lightkube.resources.authorization_v1 import SelfSubjectAccessReview

    lacking = []
    for verb, resource, sub in rights:
        review = client.create(SelfSubjectAccessReview(spec=SelfSubjectAccessReviewSpec(
            resourceAttributes=ResourceAttributes(verb=verb, resource=resource, subresource=sub or None))))
        if not review.status.allowed:
            lacking.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    return lacking


_pool_usable: set[str] = set()  # the clusters whose user was found to hold POOL_RIGHTS


def missing_pool_rights(path: str, client) -> list[str]:
    """The :data:`POOL_RIGHTS` the user of ``path`` lacks; asked once per process once it holds them all."""
    if path in _pool_usable:
        return []
    lacking = missing_rights(client, POOL_RIGHTS)
    if not lacking:
        _pool_usable.add(path)
    return lacking


def available(path: str, client) -> tuple[bool, str]:
    """(True, the API server) when the cluster of ``path`` (``client``'s) answers, its user has the rights the kit
    needs (:data:`RIGHTS`) and it has a node for the kit's Pods; else (False, what is wrong and what to do)."""
    if path in _usable:  # asked once per process: a launcher is made for every testbed
        return True, _usable[path]
    try:
        lacking = missing_rights(client)
        if not lacking:
            name, mine = node(path, client)
            lacking = [] if mine else missing_rights(client, (FORWARD,))
    except Exception as exc:
        return False, (f"cannot use the cluster of {path} ({KUBECONFIG_ENV}): {exc}\n"
                       "Check that `kubectl --kubeconfig <it> get nodes` answers, or drop --kubeconfig to use the "
                       "kit's one-node cluster (`eppkit cluster up`).")
    if lacking:
        return False, (f"the user of {path} may not {', '.join(lacking)} (cluster-wide): the kit makes a namespace "
                       "per testbed and its Pods, ConfigMaps and port forwards in it.\n"
                       "Bind that user to a ClusterRole with these rights (docs/kubernetes.md, \"A cluster of your "
                       "own\"), or use another kubeconfig.")
    _usable[path] = f"{client.config.cluster.server} (node {name}{', this machine' if mine else ''})"
    return True, _usable[path]


class LearnedPods:
    """Where a testbed's pool Pods are on a cluster of your own: where its pod network puts them, learned once each
    runs. Each mock listens on :data:`POD_IP` (its kubelet's expansion of the Pod's own IP) until then; what the
    other runtimes plan (:class:`eppkit.components.inference_pool.LoopbackPods`, the kit's own cluster's blocks)
    cannot be planned here."""

    learned = True

    def address(self, index: int) -> str:
        return POD_IP

    def check(self, ip: str) -> str:
        if ip != POD_IP:
            ipaddress.ip_address(ip)  # a learned one: ValueError if it is none
        return ip

    def shared_port(self, ports, hosts: list[str]) -> int:
        """Any port: each Pod has its own network namespace."""
        return ports.port()


LEARNED_PODS = LearnedPods()


class Plane:
    """The API server of a cluster of your own as the home of a testbed's InferencePool: what
    :class:`eppkit.components.controlplane.ControlPlane` is on the other runtimes (its clients, a kubeconfig in the
    testbed's namespace, the CRDs its EPP watches). The kit stops nothing of it."""

    def __init__(self, path: str) -> None:
        from lightkube import KubeConfig

        self.path = path
        self.server = KubeConfig.from_file(path).get().cluster.server
        self.written: set[str] = set()  # the kubeconfigs made from it (they hold its user's credentials)

    def client(self, namespace: str | None = None):
        from lightkube import Client, KubeConfig

        return Client(KubeConfig.from_file(self.path), namespace=namespace, field_manager="eppkit", trust_env=False)

    def async_client(self, namespace: str | None = None):
        from lightkube import AsyncClient, KubeConfig

        return AsyncClient(KubeConfig.from_file(self.path), namespace=namespace, field_manager="eppkit",
                           trust_env=False)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """The user's kubeconfig, its current context in ``namespace``."""
        import yaml

        config = yaml.safe_load(Path(self.path).read_text())
        current = config.get("current-context")
        for context in config.get("contexts") or []:
            if context.get("name") == current:
                context.setdefault("context", {})["namespace"] = namespace
        Path(path).write_text(yaml.safe_dump(config))
        Path(path).chmod(0o600)
        self.written.add(str(path))
        return Path(path)

    def served_crds(self) -> list[str]:
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        with self.client() as http:
            return sorted(crd.metadata.name for crd in http.list(CustomResourceDefinition))

    def apply_crds(self, files: list[Path], timeout_s: float = 60.0) -> list[str]:
        """The CRDs of ``files`` the cluster lacks, made, and each Established; those it has are left as they are
        (a cluster's CRDs are its owner's). Their names."""
        import yaml
        from lightkube import ApiError
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        manifests = [(f, doc) for f in files for doc in yaml.safe_load_all(Path(f).read_text()) if doc]
        with self.client() as http:
            for source, manifest in manifests:
                name = manifest["metadata"]["name"]
                try:
                    http.get(CustomResourceDefinition, name)
                    continue
                except ApiError as exc:
                    if exc.status.code != 404:
                        raise
                try:
                    http.create(CustomResourceDefinition.from_dict(manifest))
                except ApiError as exc:
                    if exc.status.code != 409:
                        raise RuntimeError(f"the cluster of {self.path} has no CRD {name}, and making it was refused "
                                           f"({exc.status.message}): install it (kubectl apply -f {source}) or "
                                           "give a user who may") from None
                deadline = time.monotonic() + timeout_s
                while not any(c.type == "Established" and c.status == "True" for c in
                              (http.get(CustomResourceDefinition, name).status.conditions or [])):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"CRD {name} not Established within {timeout_s:g} s on the cluster of "
                                           f"{self.path}")
                    time.sleep(0.05)
        return [m["metadata"]["name"] for _, m in manifests]
