"""A cluster of your own, by kubeconfig (``--kubeconfig FILE``, ``pytest --eppkit-kubeconfig FILE``, a launcher's
``kubeconfig=`` option): the kubernetes runtime's testbeds on it instead of the one-node cluster the kit starts here,
through one handle (:class:`OwnCluster`, a :class:`~eppkit.cluster.handle.Cluster`).

The kit reaches such a cluster through its API server only (:mod:`eppkit.cluster.apipod`): each component a Pod on
the host network of **one node** (the first Ready one, or ``EPPKIT_KUBE_NODE``), all of a testbed's Pods on that
node, binding 127.0.0.1 there on the ports the testbed leased, so rendered configs are the other runtimes'; files
from ConfigMaps; output through ``pods/log``; and, when that node is another machine, each port the kit reaches
(Envoy's listener and admin, Jaeger's query and OTLP, each service's port) forwarded from this host's 127.0.0.1 on
the same number through the API server (:mod:`eppkit.cluster.portforward`), so every URL stays the same. Images
are pulled by the node (``imagePullPolicy: IfNotPresent``, the kit's tags): load them first (``kind load
docker-image``) or push them where the node pulls from.

A mode whose EPP watches an InferencePool keeps its pool in this API server (:class:`OwnPlane`), its Pods on the
cluster's pod network where its network puts them (:class:`LearnedPods`: each mock listens on ``$(POD_IP)``, the
testbed takes the address from the running Pod), its mocks' spans sent to Jaeger at the node's InternalIP
(:meth:`OwnCluster.pods_host`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from eppkit.cluster import namespaces
from eppkit.components import kubeapi
from eppkit.core.settings import Settings, settings

if TYPE_CHECKING:
    from eppkit.cluster.pod import PodSite


KUBECONFIG_ENV = Settings.variable("kubeconfig")  # carries a cluster of your own to the processes a process starts
REGISTRY_ENV = Settings.variable("image_registry")  # and where its Pods pull the kit's images from
NODE_ENV = Settings.variable("kube_node")  # the node of a cluster of your own its Pods run on (else the first Ready)


class ChosenNode(NamedTuple):
    name: str
    mine: bool  # its addresses are this machine's
    address: str | None  # its InternalIP (None: a loopback one, which no Pod reaches)


def _choose_node(where: str, client, wanted: str) -> ChosenNode:
    from lightkube.resources.core_v1 import Node

    nodes = list(client.list(Node))
    ready = [n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
             and not any(t.effect in ("NoSchedule", "NoExecute") for t in (n.spec.taints or []))]
    if wanted:
        chosen = next((n for n in nodes if n.metadata.name == wanted), None)
        if chosen is None:
            raise RuntimeError(f"{NODE_ENV}={wanted}: the cluster of {where} has no such node "
                               f"(it has {', '.join(n.metadata.name for n in nodes) or 'none'})")
    elif ready:
        chosen = ready[0]
    else:
        raise RuntimeError(f"the cluster of {where} has no Ready node without a NoSchedule taint "
                           f"(nodes: {', '.join(n.metadata.name for n in nodes) or 'none'}); name one: {NODE_ENV}=NAME")
    addresses = [a.address for a in (chosen.status.addresses or [])]
    internal = next((a.address for a in (chosen.status.addresses or []) if a.type == "InternalIP"), None)
    return ChosenNode(chosen.metadata.name, any(_is_mine(a) for a in addresses),
                      None if internal is None or ipaddress.ip_address(internal).is_loopback else internal)


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


class OwnPlane:
    """The API server of a cluster of your own as the home of a testbed's InferencePool (a
    :class:`~eppkit.components.kubeapi.ApiServer`, as :class:`~eppkit.components.controlplane.ControlPlane` is on
    the other runtimes): its clients, a kubeconfig in the testbed's namespace, the CRDs its EPP watches. The kit stops
    nothing of it. Made of its cluster's kubeconfig as parsed once (``config``: a lightkube KubeConfig; ``raw``: the
    file's content, ``path``: where it is)."""

    def __init__(self, path: str, config, raw: dict) -> None:
        self.path, self._config, self._raw = path, config, raw
        self.server = config.get().cluster.server
        self.written: set[str] = set()  # the kubeconfigs made from it (they hold its user's credentials)

    @classmethod
    def from_file(cls, path: str) -> OwnPlane:
        import yaml

        raw = yaml.safe_load(Path(path).read_text())
        from lightkube import KubeConfig

        return cls(path, KubeConfig.from_dict(raw, fname=path), raw)

    def client(self, namespace: str | None = None):
        return kubeapi.client(self._config, namespace)

    def async_client(self, namespace: str | None = None):
        return kubeapi.client(self._config, namespace, asynchronous=True)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """The user's kubeconfig, its current context in ``namespace``."""
        import copy

        import yaml

        config = copy.deepcopy(self._raw)
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


class OwnCluster:
    """A cluster of your own by kubeconfig (module docstring), one :class:`~eppkit.cluster.handle.Cluster`: its
    kubeconfig parsed once, its client built once, its node chosen once, its rights asked once, the port forwards of
    its Pods authenticated as its kubeconfig says."""

    def __init__(self, path: str | os.PathLike, registry: str | None = None, node: str | None = None) -> None:
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_file():
            raise ValueError(f"--kubeconfig {path}: no such file")
        self.kubeconfig = str(resolved)
        self.registry = (registry or "").strip().rstrip("/") or None
        self.wanted_node = (node if node is not None else settings().kube_node or "").strip()
        self.plane = OwnPlane.from_file(self.kubeconfig)  # the file, parsed once
        self._lock = threading.Lock()
        self._client = self._node = self._usable = self._access = None
        self._pool_rights = False  # its user was found to hold POOL_RIGHTS
        self._swept = False

    def __repr__(self) -> str:
        return f"OwnCluster({self.kubeconfig!r})"

    def client(self):
        with self._lock:
            if self._client is None:
                self._client = self.plane.client()
            return self._client

    def env(self) -> dict[str, str]:
        return {KUBECONFIG_ENV: self.kubeconfig, **({REGISTRY_ENV: self.registry} if self.registry else {}),
                **({NODE_ENV: self.wanted_node} if self.wanted_node else {})}

    # -- its node --
    def node(self) -> ChosenNode:
        """The node every Pod of the kit's testbeds on it runs on: ``EPPKIT_KUBE_NODE``'s, else the first Ready one
        without a NoSchedule taint; asked once."""
        if self._node is None:
            self._node = _choose_node(self.kubeconfig, self.client(), self.wanted_node)
        return self._node

    def node_name(self) -> str:
        return self.node().name

    def reaches_this_host(self) -> bool:
        """Its kit's node is this machine, whose loopback its host-network Pods share."""
        return self.node().mine

    def pods_host(self) -> str | None:
        """Its node's InternalIP (None: a loopback one, which no Pod reaches)."""
        return self.node().address

    def api_server_for_pods(self) -> str | None:
        """The kubeconfig's server where its node is this machine (which reaches it); else None."""
        return self.plane.server if self.reaches_this_host() else None

    def access(self):
        """How its port forwards reach its API server (:class:`~eppkit.cluster.portforward.ApiAccess`)."""
        if self._access is None:
            from eppkit.cluster.portforward import ApiAccess

            self._access = ApiAccess.from_config(self.plane._config.get(), self.kubeconfig)
        return self._access

    def site(self, ports: Sequence[int], helper_image: Callable[[], str]) -> PodSite:
        """On its node's host network, reached through its API server alone; ``ports`` forwarded from this host when
        that node is another machine."""
        from eppkit.cluster.apipod import ApiSite

        chosen = self.node()
        forward = None if chosen.mine or not ports else (self.access(), tuple(sorted(set(ports))))
        return ApiSite(self, chosen.name, helper_image(), forward)

    # -- its rights --
    def available(self) -> tuple[bool, str]:
        """(True, the API server) when it answers, its user has the rights the kit needs (:data:`RIGHTS`) and it has
        a node for the kit's Pods; else (False, what is wrong and what to do). Asked once once it is."""
        if self._usable is not None:
            return True, self._usable
        try:
            lacking = missing_rights(self.client())
            if not lacking:
                chosen = self.node()
                lacking = [] if chosen.mine else missing_rights(self.client(), (FORWARD,))
        except Exception as exc:  # noqa: BLE001  (said in words: what failed and what to do)
            return False, (f"cannot use the cluster of {self.kubeconfig} ({KUBECONFIG_ENV}): {exc}\n"
                           "Check that `kubectl --kubeconfig <it> get nodes` answers, or drop --kubeconfig to use the "
                           "kit's one-node cluster (`eppkit cluster up`).")
        if lacking:
            return False, (f"the user of {self.kubeconfig} may not {', '.join(lacking)} (cluster-wide): the kit makes "
                           "a namespace per testbed and its Pods, ConfigMaps and port forwards in it.\n"
                           "Bind that user to a ClusterRole with these rights (docs/kubernetes.md, \"A cluster of your "
                           "own\"), or use another kubeconfig.")
        self._usable = f"{self.plane.server} (node {chosen.name}{', this machine' if chosen.mine else ''})"
        return True, self._usable

    def pool_home(self) -> OwnPlane:
        """Its API server, once its user is found to hold :data:`POOL_RIGHTS` (asked until it does)."""
        if not self._pool_rights:
            lacking = missing_rights(self.client(), POOL_RIGHTS)
            if lacking:
                from eppkit.cluster import ClusterError

                raise ClusterError(
                    f"a mode whose EPP watches an InferencePool: the user of {self.kubeconfig} may not "
                    f"{', '.join(lacking)}; bind it to the ClusterRole of docs/kubernetes.md (\"A cluster of your "
                    "own\"), or use another kubeconfig")
            self._pool_rights = True
        return self.plane

    def sweep(self) -> list[str]:
        if self._swept:
            return []
        self._swept = True
        return namespaces.sweep(self.client())

    # -- what its Pods run and are given --
    def image(self, tag: str, kits: bool = True) -> str:
        """Pulled by its node: the kit's images from the registry given (else as they are: loaded into the node);
        an image of yours as you named it."""
        return f"{self.registry}/{tag}" if kits and self.registry else tag

    def pod_addresses(self, namespace: str) -> LearnedPods:
        return LEARNED_PODS

    def release_addresses(self, addresses: LearnedPods) -> None:
        """Nothing held: its network placed each Pod."""

    def program_image(self, argv: Sequence[str], image: str | None) -> Path | None:
        """A program file of this host (GAIE's EPP as the kit built it), which no ConfigMap holds."""
        if image or not argv:
            return None
        program = Path(argv[0])
        if not program.is_absolute() or not program.is_file() or str(program) == sys.executable:
            return None
        return program

    def pod_paths(self, config: Path, run_dir: Path, named: list[Path], live: Path) -> tuple[list[Path], set[Path]]:
        """Each file it names (its config too) from a ConfigMap; ``live`` a live folder (kept up to date)."""
        paths = [config, *(p for p in named if live != p and live not in p.parents)]
        return (paths + [live], {live}) if live.is_dir() else (paths, set())

    def pod_kubeconfig(self, paths: Sequence[str]) -> list[str]:
        """The kubeconfigs made from its user's (:attr:`OwnPlane.written`): its credentials go in no ConfigMap."""
        return [path for path in self.plane.written if path in paths]
