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
the kit reaches forwarded from this host when that node is another machine, images pulled by the node (a program of
this host a kit image would run, GAIE's EPP, in an image of its own). A pool's Pods are where its network puts them
(:class:`~eppkit.cluster.remote.LearnedPods`), its InferencePool in its API server (:class:`~eppkit.cluster.remote.Plane`),
Envoy's endpoints a live folder (:mod:`eppkit.cluster.apipod`). A program of this host runs there only when the node
is this machine.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from eppkit import cluster
from eppkit.cluster import apipod, namespaces, podnet, remote
from eppkit.cluster import images as node_images
from eppkit.components.controlplane import ControlPlane
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.gateway import eds
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import common, images
from eppkit.runtimes.registry import Capabilities, register

if TYPE_CHECKING:
    from eppkit.cluster.pod import ManagedPod

PODS = "eppkit.cluster.pod"  # what its components are: imported when it makes the first
_swept: list[str] | None = None  # the namespaces of dead sessions this process removed (None: not looked yet)


def cluster_available() -> tuple[bool, str]:
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


def sweep_once() -> list[str]:
    """The namespaces of sessions that died without stopping their testbeds, removed (their pods' addresses too) the
    first time this process asks; [] after."""
    global _swept
    if _swept is not None:
        return []
    _swept = namespaces.sweep()
    if remote.kubeconfig() is None:
        podnet.Blocks(cluster.layout().blocks).release_owned(set(_swept))
    return _swept


class PodLauncher:
    """The program is an image's entrypoint in a Pod (Jaeger, Envoy): what ContainerLauncher is on docker."""

    def __init__(self, image: str, namespace: str, *, entrypoint=None, labels=None, pod=None):
        self.image, self.namespace, self.entrypoint, self.labels = image, namespace, entrypoint, labels or {}
        self.pod = pod or (lambda made, ports: made)  # the launcher's finishing touch (a cluster of your own's)
        self.ports: tuple[int, ...] = ()  # the ports the kit reaches it on
        self.live: set[Path] = set()  # folders given as live ones (apipod.LIVE: kept up to date from this host)

    def make(self, name, args, log_path, *, env=None, mounts=()):
        from eppkit.cluster.pod import ManagedPod

        made = ManagedPod(name, self.image, list(map(str, args)), log_path, namespace=self.namespace,
                          entrypoint=self.entrypoint, extra_labels=self.labels).with_env(**(env or {}))
        for path in mounts:
            made.with_mount(path, apipod.LIVE if Path(path) in self.live else "ro")
        return self.pod(made, self.ports)


class KubernetesLauncher:
    """Each component a Pod of the one-node cluster (see the module docstring)."""

    runtime = "kubernetes"

    def __init__(self, image_set: images.ImageSet | None = None, kubeconfig: str | None = None) -> None:
        remote.use(kubeconfig)  # here and in what this process starts (its watchdog too)
        self.remote = remote.kubeconfig()  # a cluster of your own (None: the one-node cluster)
        ok, why = cluster_available()
        if not ok:
            raise cluster.ClusterError(why)
        sweep_once()
        self._images = common.ImageSource(image_set)  # the docker runtime's images (built locally) are the pods' too
        self._namespaces: dict[Path, str] = {}  # made once per testbed, not once per component
        self._imported: set[str] = set()  # on the node already: no `ctr images ls` per component
        self._blocks: dict[Path, podnet.BlockPods] = {}  # each testbed's block of pod addresses
        self._planes: dict[Path, remote.Plane] = {}  # a cluster of your own: each testbed's pool home

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
        made.helper_image = self._image(self._images.images().services)  # puts a large file's parts together
        if not mine:
            made.forward_ports(remote.access(self.remote), ports)
        return made

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, image: str | None = None, **kwargs) -> Jaeger:
        launcher = PodLauncher(self._image(image or self._images.images().jaeger), self._namespace(run_dir),
                               labels=self._labels(run_dir), pod=self._remote_pod)
        made = Jaeger(run_dir, launcher, ports=ports, pods_host=self._pods_host(), **kwargs)
        launcher.ports = dataclasses.astuple(made.ports)
        return made

    def _pods_host(self) -> str | None:
        """Where a Pod of the pod network reaches the node's host network (Jaeger takes spans there too): the kit's
        bridge; on a cluster of your own its node's InternalIP (None: a loopback one)."""
        if self.remote is None:
            return podnet.HOST
        return remote.node_address(self.remote, namespaces.client())

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]):
        pod_ip = _pod_network_address(spec)
        if spec.on_host:  # a program of yours, a real vLLM: its environment, not the kit's image
            if self.remote is not None and not remote.reaches_this_host(self.remote, namespaces.client()):
                raise cluster.ClusterError(
                    f"{spec.name} runs on this host (a program of yours, a real vLLM), which the Pods of the cluster "
                    f"of {self.remote} cannot reach (their node is another machine): give it as an image "
                    "(--epp-image), or run it on the local or docker runtime")
            if pod_ip is not None:
                raise ValueError(f"{spec.name} runs on the host, and on this runtime an InferencePool's pods are Pods "
                                 "of the pod network: use the kit's mock as the backend, or another runtime")
            return common.host_service(spec, env, run_dir, extra_args)
        spec, env, by_name = self._no_user_credentials(spec, env, run_dir)
        program = self._program_of_this_host(spec)
        if program is not None:  # on a cluster of your own: in an image of its own, at its host path
            image = self._image(program_image(program))
        elif spec.image:
            image = self._image(spec.image, kits=False)
        else:
            image = self._image(self._images.images().services)
        namespace = self._namespace(run_dir)
        if pod_ip is not None:  # a pool's pod: reaches the host's network at the node's address, not at 127.0.0.1
            pods_host = self._pods_host()
            if pods_host is None:
                raise cluster.ClusterError(
                    f"{spec.name} is a Pod of the pod network, and the node {remote.node(self.remote, namespaces.client())[0]} "
                    f"of {self.remote} has only a loopback address, which no Pod reaches: name a node with an "
                    f"InternalIP ({remote.NODE_ENV}=NAME)")
            env = {k: _to_host(v, pods_host) for k, v in env.items()}
            extra_args = [_to_host(a, pods_host) for a in extra_args]
        from eppkit.cluster.pod import ManagedPod

        made = common.service_in_image(spec, env, run_dir, extra_args, lambda name, argv, log: ManagedPod(
            name, image, argv, log, namespace=namespace, extra_labels=self._labels(run_dir)))
        if program is not None:  # in its image: not a file the Pod is given
            made.mounts.pop(str(program), None)
        if pod_ip is not None:  # on a cluster of your own, where its network puts it (remote.POD_IP)
            made.on_pod_network(None if pod_ip == remote.POD_IP else pod_ip, ready_path=spec.health_path,
                                port=spec.port)
        if spec.kube_rbac:  # a Kubernetes client (an EPP watching its pool): in-cluster, with its own rights
            made.in_cluster(namespaces.grant(namespace, namespaces.dns_label(spec.name), spec.kube_rbac),
                            self._api_server_for_pods())
            if by_name:  # its kubeconfig names the API server by the cluster's DNS name
                made.dns_policy = "ClusterFirstWithHostNet"
        # On a cluster of your own its folders (the run folder, its working one) are empty ones of its own, the
        # files it names come from a ConfigMap (eppkit.cluster.apipod).
        if pod_ip is not None:  # on the pod network: nothing forwarded (this host reaches no Pod there by its port)
            return self._remote_pod(made, [])
        return self._remote_pod(made, [p for p in (spec.port, spec.grpc_health_port) if p])

    def _no_user_credentials(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path):
        """On a cluster of your own, a service given the testbed's kubeconfig ({kubeconfig}, KUBECONFIG: your
        user's credentials, which the kit puts in no ConfigMap) is given one of its own ServiceAccount instead
        (pod.in_cluster_kubeconfig), at the same place in its arguments and environment. (spec, env, whether that
        kubeconfig names the API server by the cluster's DNS name)."""
        plane = self._planes.get(run_dir)
        mentions = [path for path in (plane.written if plane is not None else ())
                    if any(path in value for value in (*(spec.argv or ()), *spec.args, *env.values(),
                                                       *spec.env.values()))]
        if not mentions:
            return spec, env, False
        if not spec.kube_rbac:
            raise cluster.ClusterError(f"{spec.name} is given the kubeconfig of {self.remote}, which holds your "
                                       "user's credentials: the kit puts them in no ConfigMap")
        from eppkit.cluster.pod import CLUSTER_DNS_SERVER, in_cluster_kubeconfig

        server = self._api_server_for_pods()
        own = in_cluster_kubeconfig(run_dir / f"{spec.name}.in-cluster.kubeconfig", server or CLUSTER_DNS_SERVER,
                                    self._namespace(run_dir))

        def swap(value: str) -> str:
            for path in mentions:
                value = value.replace(path, str(own))
            return value

        spec = dataclasses.replace(spec, argv=[swap(a) for a in spec.argv] if spec.argv else spec.argv,
                                   args=[swap(a) for a in spec.args], env={k: swap(v) for k, v in spec.env.items()})
        return spec, {k: swap(v) for k, v in env.items()}, server is None

    def _program_of_this_host(self, spec: ServiceSpec) -> Path | None:
        """On a cluster of your own, the program of this host a service of the kit's image runs (its first argument:
        GAIE's EPP as the kit built it), which no ConfigMap holds: it goes in an image of its own. Else None."""
        if self.remote is None or spec.image or not spec.argv:
            return None
        program = Path(spec.argv[0])
        if not program.is_absolute() or not program.is_file() or str(program) == sys.executable:
            return None
        return program

    def _api_server_for_pods(self) -> str | None:
        """The API server's address for an in-cluster client on the host network: the kit's own; on a cluster of
        your own whose node is this machine, the kubeconfig's (this machine reaches it); else None: the
        ``KUBERNETES_SERVICE_HOST`` its kubelet gives every Pod (the ``kubernetes`` Service, routed by the node)."""
        if self.remote is None:
            return cluster.running()["server"]
        client = namespaces.client()
        return client.config.cluster.server if remote.reaches_this_host(self.remote, client) else None

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        text = config_path.read_text() + "\n" + "\n".join(env.values())
        if self.remote is None:
            mounts = [run_dir, *common.host_paths(text, skip_under=(run_dir,))]
        else:  # the files it names (its config too), each from a ConfigMap; its pool's endpoints a live folder
            live = run_dir / eds.FOLDER
            mounts = [config_path, *(p for p in common.host_paths(text) if live != p and live not in p.parents)]
            mounts += [live] if live.is_dir() else []
        launcher = PodLauncher(self._image(self._images.envoy_image(binary)), self._namespace(run_dir),
                               entrypoint=common.ENVOY_ENTRYPOINT, labels=self._labels(run_dir), pod=self._remote_pod)
        if self.remote is not None:
            launcher.live = {run_dir / eds.FOLDER}
        launcher.ports = (admin_port, *_listener_ports(config_path))
        return common.envoy_in_image(launcher, config_path, run_dir, admin_port, env, mounts)

    # -- an InferencePool's home: the cluster's API server, the testbed's namespace, its block of the pod network --
    def pool_home(self, run_dir: Path) -> tuple[ControlPlane | remote.Plane, str]:
        """Where a testbed's InferencePool lives: the cluster's own API server, in the testbed's namespace, its
        pods the Pods the kubelet runs (eppkit.components.inference_pool's real_pods)."""
        if self.remote is not None:
            lacking = remote.missing_pool_rights(self.remote, namespaces.client())
            if lacking:
                raise cluster.ClusterError(
                    f"a mode whose EPP watches an InferencePool: the user of {self.remote} may not "
                    f"{', '.join(lacking)}; bind it to the ClusterRole of docs/kubernetes.md (\"A cluster of your "
                    "own\"), or use another kubeconfig")
            self._planes[run_dir] = remote.Plane(self.remote)
            return self._planes[run_dir], self._namespace(run_dir)
        return ControlPlane.attached(cluster.layout().plane), self._namespace(run_dir)

    def pod_addresses(self, run_dir: Path) -> podnet.BlockPods | remote.LearnedPods:
        """The testbed's block of the pod network (reserved once, given back at release); on a cluster of your own,
        where its network puts each Pod (learned)."""
        if self.remote is not None:
            return remote.LEARNED_PODS
        if run_dir not in self._blocks:
            blocks = podnet.Blocks(cluster.layout().blocks)
            self._blocks[run_dir] = podnet.BlockPods(blocks.reserve(self._namespace(run_dir)))
        return self._blocks[run_dir]

    def release(self, run_dir: Path) -> None:
        """The testbed stopped: its namespace goes (its Pods are gone already), and its block of addresses."""
        namespaces.delete_namespace(self._namespaces.pop(run_dir, namespaces.dns_label(Path(run_dir).name)), wait_s=30.0)
        self._planes.pop(run_dir, None)
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
    on_network = [h for h in hosts if h == remote.POD_IP or _in_subnet(h)]
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


def _to_host(value: str, pods_host: str) -> str:
    """What a Pod of the pod network is told: the host's loopback is ``pods_host`` for it (the node's address)."""
    return value.replace("127.0.0.1:", f"{pods_host}:")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def program_image(program: Path) -> str:
    """A program of this host in an image of its own (``eppkit/program-<its name>``), for a cluster of your own."""
    return images.program_image(program, f"program-{namespaces.dns_label(program.name)}", progress=_progress)


def pod_images() -> list[str]:
    """The images the Pods of a cluster of your own run, made or found now (what to load into its nodes): Envoy (the
    one installed with eppkit), Jaeger, the kit's services, and GAIE's EPP (once built) in an image of its own."""
    from eppkit.builds import gaie

    source = common.ImageSource()
    made = source.images()
    envoy = source.envoy_image(envoy_versions.resolve(None, _progress))
    built = gaie.find()
    return list(dict.fromkeys((envoy, made.jaeger, made.services, *([program_image(built)] if built else []))))


class KubernetesRuntime:
    """Pods of the kit's one-node cluster (`eppkit cluster up`), or of a cluster of yours (--kubeconfig), from the
    docker runtime's images: named, never one of `all`."""

    name, order = "kubernetes", 20
    capabilities = Capabilities(in_all=False, builds=("images",), cluster=True)

    def available(self) -> tuple[bool, str]:
        ok, detail = common.engine_available()  # the pods' images are built by the Docker engine
        return cluster_available() if ok else (ok, detail)

    def sweep(self) -> str:
        gone = sweep_once()
        return f"removed {len(gone)} namespace(s) of eppkit sessions that died: {', '.join(gone)}" if gone else ""

    prepare = staticmethod(common.prepare_images)

    def launcher(self, image_set: images.ImageSet | None = None, kubeconfig: str | None = None) -> KubernetesLauncher:
        return KubernetesLauncher(image_set, kubeconfig)

    def leftovers(self) -> str:
        return common.session_leftovers(PODS, "pods", lambda p: f"{p.namespace}/{p.name}")

    # A dead worker's namespaces: its watchdog deletes them (eppkit.components.reaper), or the next session's sweep.
    workers_leftovers = staticmethod(common.nothing_left)

    def reaches_this_host(self) -> bool:
        """A cluster of your own whose node is another machine does not."""
        own = remote.kubeconfig()
        return own is None or remote.reaches_this_host(own, namespaces.client())


register(KubernetesRuntime())
