"""The kubernetes runtime: every component of the testbed a Pod of the one-node cluster (:mod:`eppkit.cluster`,
``eppkit cluster up``), in a namespace of the testbed's own.

Same topology in, same handles out: :class:`KubernetesLauncher` is what it hands the
:class:`~eppkit.runtimes.testbed.Testbed`, whose components are then :class:`~eppkit.cluster.pod.ManagedPod` s.
Pods use the host's network and bind 127.0.0.1 on the ports the testbed picked, so URLs, rendered configs and
readiness checks are the local runtime's; files a component reads are mounted at the same path (hostPath). The images
are the docker runtime's (:mod:`eppkit.runtimes.images`), imported into the node's containerd once each. What runs on
the host on every runtime (a program of yours, a real vLLM, the control plane of an EPP that watches an
InferencePool) runs on the host here too.

On a cluster of your own (``--kubeconfig``: :mod:`eppkit.cluster.remote`) the Pods are made so that only its API
server is needed: on the host network of one node, files from ConfigMaps, output through ``pods/log``, the ports
the kit reaches forwarded from this host when that node is another machine, images pulled by the node.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

import yaml

from eppkit import cluster
from eppkit.cluster import images as node_images
from eppkit.cluster import namespaces, podnet, remote
from eppkit.cluster.pod import ManagedPod
from eppkit.components.controlplane import ControlPlane
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.components.readiness import LogLineReady
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import images
from eppkit.runtimes.docker import ENVOY_ENTRYPOINT, DockerLauncher, host_paths, service_in_image
from eppkit.runtimes.local import LocalLauncher

_swept = False


def available() -> tuple[bool, str]:
    """(True, the API server) when the cluster answers (a cluster of your own by kubeconfig, else the one-node
    cluster); (False, how to get one) when not."""
    if remote.kubeconfig() is not None:
        return remote.available(remote.kubeconfig(), namespaces.client())
    state = cluster.running()
    if state is not None:
        return True, state["server"]
    lacks = cluster.missing()
    if lacks:
        return False, str(cluster.missing_error(lacks))
    return False, "the one-node Kubernetes cluster is not running: `eppkit cluster up` starts it (a few seconds)"


class PodLauncher:
    """The program is an image's entrypoint in a Pod (Jaeger, Envoy): what ContainerLauncher is on docker."""

    def __init__(self, image: str, namespace: str, *, entrypoint=None, labels=None, pod=None):
        self.image, self.namespace, self.entrypoint, self.labels = image, namespace, entrypoint, labels or {}
        self.pod = pod or (lambda made, ports: made)  # the launcher's finishing touch (a cluster of your own's)
        self.ports: tuple[int, ...] = ()  # the ports the kit reaches it on

    def make(self, name, args, log_path, *, env=None, mounts=()):
        made = ManagedPod(name, self.image, list(map(str, args)), log_path, namespace=self.namespace,
                          entrypoint=self.entrypoint, extra_labels=self.labels).with_env(**(env or {}))
        for path in mounts:
            made.with_mount(path, "ro")
        return self.pod(made, self.ports)


class KubernetesLauncher:
    """Each component a Pod of the one-node cluster (see the module docstring)."""

    runtime = "kubernetes"

    def __init__(self, image_set: images.ImageSet | None = None, kubeconfig: str | None = None) -> None:
        global _swept
        remote.use(kubeconfig)  # here and in what this process starts (its watchdog too)
        self.remote = remote.kubeconfig()  # a cluster of your own (None: the one-node cluster)
        ok, why = available()
        if not ok:
            raise cluster.ClusterError(why)
        if not _swept:  # namespaces of sessions that died without stopping their testbeds
            gone = namespaces.sweep()
            if self.remote is None:
                podnet.Blocks(cluster.layout().blocks).release_owned(set(gone))  # their pods' addresses too
            _swept = True
        self._docker = DockerLauncher(image_set)  # its images (built locally) are the pods' too
        self._host = LocalLauncher()
        self._namespaces: dict[Path, str] = {}  # made once per testbed, not once per component
        self._imported: set[str] = set()  # on the node already: no `ctr images ls` per component
        self._blocks: dict[Path, podnet.BlockPods] = {}  # each testbed's block of pod addresses

    def _namespace(self, run_dir: Path) -> str:
        if run_dir not in self._namespaces:
            self._namespaces[run_dir] = namespaces.ensure_namespace(Path(run_dir).name)
        return self._namespaces[run_dir]

    def _image(self, tag: str, kits: bool = True) -> str:
        """What a Pod runs for ``tag``: on the kit's node, imported from docker once; on a cluster of your own, pulled
        by its node (the kit's images from --image-registry when given; an image of yours as you named it)."""
        if self.remote is not None:  # its node pulls it (loaded there, or pushed where it pulls from)
            return remote.image(tag) if kits else tag
        if tag not in self._imported:
            node_images.ensure_from_docker(cluster.layout().containerd_socket, tag,
                                           cluster.layout().home / "images.lock")
            self._imported.add(tag)
        return tag

    @staticmethod
    def _labels(run_dir: Path) -> dict[str, str]:
        return {"eppkit.testbed": namespaces.label_value(Path(run_dir).name)}

    def _remote_pod(self, made: ManagedPod, ports) -> ManagedPod:
        """On a cluster of your own: reached through its API server alone, on its one node's host network, each of
        ``ports`` forwarded from this host when that node is another machine (eppkit.cluster.remote)."""
        if self.remote is None:
            return made
        node, mine = remote.node(self.remote, namespaces.client())
        made.api_only, made.node = True, node
        made.helper_image = self._image(self._docker.images().services)  # puts a large file's parts together
        if not mine:
            made.forward_ports(remote.access(self.remote), ports)
        return made

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, image: str | None = None, **kwargs) -> Jaeger:
        launcher = PodLauncher(self._image(image or self._docker.images().jaeger), self._namespace(run_dir),
                               labels=self._labels(run_dir), pod=self._remote_pod)
        made = Jaeger(run_dir, launcher, ports=ports, pods_host=None if self.remote else podnet.HOST, **kwargs)
        launcher.ports = dataclasses.astuple(made.ports)
        return made

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]):
        pod_ip = _pod_network_address(spec)
        if spec.on_host:  # a program of yours, a real vLLM: its environment, not the kit's image
            if self.remote is not None:
                raise cluster.ClusterError(
                    f"{spec.name} runs on this host (a program of yours, a real vLLM), which the Pods of the cluster "
                    f"of {self.remote} cannot reach: give it as an image (--epp-image), or run it on the local or "
                    "docker runtime")
            if pod_ip is not None:
                raise ValueError(f"{spec.name} runs on the host, and on this runtime an InferencePool's pods are Pods "
                                 "of the pod network: use the kit's mock as the backend, or another runtime")
            return self._host.service(spec, env, run_dir, extra_args)
        image = self._image(spec.image, kits=False) if spec.image else self._image(self._docker.images().services)
        namespace = self._namespace(run_dir)
        if pod_ip is not None:  # a pool's pod: reaches the host's network at podnet.HOST, not at 127.0.0.1
            env = {k: _to_host(v) for k, v in env.items()}
            extra_args = [_to_host(a) for a in extra_args]
        made = service_in_image(spec, env, run_dir, extra_args, lambda name, argv, log: ManagedPod(
            name, image, argv, log, namespace=namespace, extra_labels=self._labels(run_dir)))
        if pod_ip is not None:
            made.on_pod_network(pod_ip, ready_path=spec.health_path, port=spec.port)
        if spec.kube_rbac:  # a Kubernetes client (an EPP watching its pool): in-cluster, with its own rights
            made.in_cluster(namespaces.grant(namespace, namespaces.dns_label(spec.name), spec.kube_rbac),
                            cluster.running()["server"])
        # On a cluster of your own its folders (the run folder, its working one) are empty ones of its own, the
        # files it names come from a ConfigMap (eppkit.cluster.apipod).
        return self._remote_pod(made, [p for p in (spec.port, spec.grpc_health_port) if p])

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        text = config_path.read_text() + "\n" + "\n".join(env.values())
        if self.remote is None:
            mounts = [run_dir, *host_paths(text, skip_under=(run_dir,))]
        else:  # the files it names (its config too), each from a ConfigMap
            mounts = [config_path, *host_paths(text)]
        launcher = PodLauncher(self._image(self._docker.envoy_image(binary)), self._namespace(run_dir),
                               entrypoint=ENVOY_ENTRYPOINT, labels=self._labels(run_dir), pod=self._remote_pod)
        launcher.ports = (admin_port, *_listener_ports(config_path))
        return envoy_process.Envoy(config_path, run_dir / "envoy.log", admin_port, launcher, env=env,
                                   log_level="info", mounts=mounts, ready=LogLineReady("starting main dispatch loop"))

    # -- an InferencePool's home: the cluster's API server, the testbed's namespace, its block of the pod network --
    def pool_home(self, run_dir: Path) -> tuple[ControlPlane, str]:
        """Where a testbed's InferencePool lives: the cluster's own API server, in the testbed's namespace, its
        pods the Pods the kubelet runs (eppkit.components.inference_pool's real_pods)."""
        self._only_own_cluster("a mode whose EPP watches an InferencePool")
        return ControlPlane.attached(cluster.layout().plane), self._namespace(run_dir)

    def pod_addresses(self, run_dir: Path) -> podnet.BlockPods:
        """The testbed's block of the pod network (reserved once, given back at release)."""
        self._only_own_cluster("a mode whose EPP watches an InferencePool")
        if run_dir not in self._blocks:
            blocks = podnet.Blocks(cluster.layout().blocks)
            self._blocks[run_dir] = podnet.BlockPods(blocks.reserve(self._namespace(run_dir)))
        return self._blocks[run_dir]

    def _only_own_cluster(self, what: str) -> None:
        if self.remote is not None:
            raise cluster.ClusterError(
                f"{what} runs on the kit's one-node cluster only, for now: its pool's Pods are at addresses the "
                "testbed plans before they exist, which only the kit's own pod network gives (the cluster of "
                f"{self.remote} is reached by its API server alone); drop --kubeconfig, or use --runtime local or docker")

    def release(self, run_dir: Path) -> None:
        """The testbed stopped: its namespace goes (its Pods are gone already), and its block of addresses."""
        namespaces.delete_namespace(self._namespaces.pop(run_dir, namespaces.dns_label(Path(run_dir).name)), wait_s=30.0)
        held = self._blocks.pop(run_dir, None)
        if held is not None:
            podnet.Blocks(cluster.layout().blocks).release(held.block)


def _listener_ports(config_path: Path) -> list[int]:
    """The ports Envoy's listeners bind (what a client of the testbed reaches), from its bootstrap."""
    listeners = (yaml.safe_load(config_path.read_text()).get("static_resources") or {}).get("listeners") or []
    return [int(listener["address"]["socket_address"]["port_value"]) for listener in listeners
            if "socket_address" in listener.get("address", {})]


def _pod_network_address(spec: ServiceSpec) -> str | None:
    """The spec's address when it is on the pod network (a pool's pod), else None."""
    hosts = spec.host.split(",")
    on_network = [h for h in hosts if _in_subnet(h)]
    if not on_network:
        return None
    if len(hosts) > 1:
        raise ValueError(f"{spec.name} would serve {len(hosts)} pods, and on this runtime each pod is a Pod of its "
                         "own: leave pods_per_mock at 1")
    return on_network[0]


def _in_subnet(host: str) -> bool:
    try:
        return ipaddress.ip_address(host) in podnet.SUBNET
    except ValueError:
        return False


def _to_host(value: str) -> str:
    """What a Pod of the pod network is told: the host's loopback is podnet.HOST for it."""
    return value.replace("127.0.0.1:", f"{podnet.HOST}:")


def launcher(image_set: images.ImageSet | None = None, kubeconfig: str | None = None) -> KubernetesLauncher:
    return KubernetesLauncher(image_set, kubeconfig)
