"""The kubernetes runtime: every component of the testbed a Pod of one cluster (a handle,
:class:`eppkit.cluster.handle.Cluster`): the kit's one-node cluster (:mod:`eppkit.cluster`, ``eppkit cluster up``), or
a cluster of your own; in a namespace of the testbed's own.

Same topology in, same handles out: :class:`KubernetesLauncher` is what it hands the
:class:`~eppkit.runtimes.testbed.Testbed`, whose components are then :class:`~eppkit.cluster.pod.ManagedPod` s.
Pods use the host's network and bind 127.0.0.1 on the ports the testbed picked, so URLs, rendered configs and
readiness checks are the local runtime's; files a component reads are mounted at the same path (hostPath). The images
are the docker runtime's (:mod:`eppkit.runtimes.images`), imported into the node's containerd once each. What runs on
the host on every runtime (a program of yours, a real vLLM, the control plane of an EPP that watches an
InferencePool) runs on the host here too.

On a cluster of your own (``--kubeconfig``: :class:`eppkit.cluster.remote.OwnCluster`) the Pods are made so that only
its API server is needed: on the host network of one node, files from ConfigMaps, output through ``pods/log``, the ports
the kit reaches forwarded from this host when that node is another machine, images pulled by the node (a program of
this host a kit image would run, GAIE's EPP, in an image of its own). A pool's Pods are where its network puts them
(:class:`~eppkit.cluster.remote.LearnedPods`), its InferencePool in its API server (:class:`~eppkit.cluster.remote.OwnPlane`),
Envoy's endpoints a live folder (:mod:`eppkit.cluster.apipod`). A program of this host runs there only when the node
is this machine. What differs between the two is the handle's to answer: the launcher has one class for both.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from eppkit.cluster import ClusterError, handle, namespaces, podnet, remote
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.core.progress import say
from eppkit.gateway import eds
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.plan import ServiceSpec
from eppkit.runtimes import common, images
from eppkit.runtimes.registry import Capabilities, register

if TYPE_CHECKING:
    from eppkit.components.kubeapi import ApiServer

PODS = "eppkit.cluster.pod"  # what its components are: imported when it makes the first


class KubernetesLauncher:
    """Each component a Pod of one cluster (see the module docstring): ``cluster``, the handle made where it was
    named (:mod:`eppkit.cluster.handle`); else one by ``kubeconfig``; else the one the settings name (the kit's
    one-node cluster unless ``EPPKIT_KUBECONFIG`` says otherwise)."""

    runtime = "kubernetes"

    def __init__(self, image_set: images.ImageSet | None = None, kubeconfig: str | None = None,
                 cluster: handle.Cluster | None = None) -> None:
        self.cluster = cluster or handle.named(kubeconfig)
        ok, why = self.cluster.available()
        if not ok:
            raise ClusterError(why)
        self.cluster.sweep()
        self._images = common.ImageSource(image_set)  # the docker runtime's images (built locally) are the pods' too
        self._namespaces: dict[Path, str] = {}  # made once per testbed, not once per component
        self._addresses: dict[Path, object] = {}  # each testbed's pool Pods' addresses (a block of them, or learned)

    def _namespace(self, run_dir: Path) -> str:
        if run_dir not in self._namespaces:
            self._namespaces[run_dir] = namespaces.ensure_namespace(Path(run_dir).name, self.cluster.client())
        return self._namespaces[run_dir]

    @staticmethod
    def _labels(run_dir: Path) -> dict[str, str]:
        return {"eppkit.testbed": namespaces.label_value(Path(run_dir).name)}

    def _site(self, ports):
        """Where a Pod goes, how it is reached (``ports``: those the kit reaches it on)."""
        return self.cluster.site(ports, lambda: self.cluster.image(self._images.images().services))

    def jaeger(self, run_dir: Path, ports: PortAllocator | None = None, image: str | None = None, **kwargs) -> Jaeger:
        from eppkit.cluster.pod import PodLauncher

        launcher = PodLauncher(self.cluster.image(image or self._images.images().jaeger), self._namespace(run_dir),
                               self._site, labels=self._labels(run_dir))
        made = Jaeger(run_dir, launcher, ports=ports, pods_host=self.cluster.pods_host(), **kwargs)
        launcher.ports = dataclasses.astuple(made.ports)
        return made

    def service(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path, extra_args: list[str]):
        pod_ip = _pod_network_address(spec)
        if spec.on_host:  # a program of yours, a real vLLM: its environment, not the kit's image
            if not self.cluster.reaches_this_host():
                raise ClusterError(
                    f"{spec.name} runs on this host (a program of yours, a real vLLM), which the Pods of the cluster "
                    f"of {self.cluster.kubeconfig} cannot reach (their node is another machine): give it as an image "
                    "(--epp-image), or run it on the local or docker runtime")
            if pod_ip is not None:
                raise ValueError(f"{spec.name} runs on the host, and on this runtime an InferencePool's pods are Pods "
                                 "of the pod network: use the kit's mock as the backend, or another runtime")
            return common.host_service(spec, env, run_dir, extra_args)
        spec, env, by_name = self._no_user_credentials(spec, env, run_dir)
        program = self.cluster.program_image(spec.argv, spec.image)
        if program is not None:  # its node cannot be given this host's file: in an image of its own, at its path
            image = self.cluster.image(program_image(program))
        elif spec.image:
            image = self.cluster.image(spec.image, kits=False)
        else:
            image = self.cluster.image(self._images.images().services)
        namespace = self._namespace(run_dir)
        if pod_ip is not None:  # a pool's pod: reaches the host's network at the node's address, not at 127.0.0.1
            pods_host = self.cluster.pods_host()
            if pods_host is None:
                raise ClusterError(
                    f"{spec.name} is a Pod of the pod network, and the node {self.cluster.node_name()} of "
                    f"{self.cluster.kubeconfig} has only a loopback address, which no Pod reaches: name a node with "
                    f"an InternalIP ({remote.NODE_ENV}=NAME)")
            env = {k: _to_host(v, pods_host) for k, v in env.items()}
            extra_args = [_to_host(a, pods_host) for a in extra_args]
        from eppkit.cluster.pod import ManagedPod

        # on the pod network nothing is forwarded (this host reaches no Pod there by its port)
        site = self._site([] if pod_ip is not None else [p for p in (spec.port, spec.grpc_health_port) if p])
        made = common.service_in_image(spec, env, run_dir, extra_args, lambda name, argv, log: ManagedPod(
            name, image, argv, log, namespace=namespace, site=site, extra_labels=self._labels(run_dir)))
        if program is not None:  # in its image: not a file the Pod is given
            made.mounts.pop(str(program), None)
        if pod_ip is not None:  # on a cluster of your own, where its network puts it (remote.POD_IP)
            made.on_pod_network(None if pod_ip == remote.POD_IP else pod_ip, ready_path=spec.health_path,
                                port=spec.port)
        if spec.kube_rbac:  # a Kubernetes client (an EPP watching its pool): in-cluster, with its own rights
            made.in_cluster(namespaces.grant(namespace, namespaces.dns_label(spec.name), spec.kube_rbac,
                                             self.cluster.client()), self.cluster.api_server_for_pods())
            if by_name:  # its kubeconfig names the API server by the cluster's DNS name
                made.dns_policy = "ClusterFirstWithHostNet"
        return made

    def _no_user_credentials(self, spec: ServiceSpec, env: dict[str, str], run_dir: Path):
        """A service given a kubeconfig no Pod of the cluster may be given ({kubeconfig}, KUBECONFIG: a cluster of
        your own's, which holds your user's credentials, which the kit puts in no ConfigMap) is given one of its own
        ServiceAccount instead (pod.in_cluster_kubeconfig), at the same place in its arguments and environment.
        (spec, env, whether that kubeconfig names the API server by the cluster's DNS name)."""
        mentions = self.cluster.pod_kubeconfig([*(spec.argv or ()), *spec.args, *env.values(), *spec.env.values()])
        if not mentions:
            return spec, env, False
        if not spec.kube_rbac:
            raise ClusterError(f"{spec.name} is given the kubeconfig of {self.cluster.kubeconfig}, which holds your "
                               "user's credentials: the kit puts them in no ConfigMap")
        from eppkit.cluster.pod import CLUSTER_DNS_SERVER, in_cluster_kubeconfig

        server = self.cluster.api_server_for_pods()
        own = in_cluster_kubeconfig(run_dir / f"{spec.name}.in-cluster.kubeconfig", server or CLUSTER_DNS_SERVER,
                                    self._namespace(run_dir))

        def swap(value: str) -> str:
            for path in mentions:
                value = value.replace(path, str(own))
            return value

        spec = dataclasses.replace(spec, argv=[swap(a) for a in spec.argv] if spec.argv else spec.argv,
                                   args=[swap(a) for a in spec.args], env={k: swap(v) for k, v in spec.env.items()})
        return spec, {k: swap(v) for k, v in env.items()}, server is None

    def envoy(self, binary: envoy_versions.EnvoyBinary, config_path: Path, run_dir: Path, admin_port: int,
              env: dict[str, str]) -> envoy_process.Envoy:
        text = config_path.read_text() + "\n" + "\n".join(env.values())
        mounts, live = self.cluster.pod_paths(config_path, run_dir, common.host_paths(text), run_dir / eds.FOLDER)
        from eppkit.cluster.pod import PodLauncher

        launcher = PodLauncher(self.cluster.image(self._images.envoy_image(binary)), self._namespace(run_dir),
                               self._site, entrypoint=common.ENVOY_ENTRYPOINT, labels=self._labels(run_dir))
        launcher.live = live
        launcher.ports = (admin_port, *_listener_ports(config_path))
        return common.envoy_in_image(launcher, config_path, run_dir, admin_port, env, mounts)

    # -- an InferencePool's home: the cluster's API server, the testbed's namespace, its pool Pods' addresses --
    def pool_home(self, run_dir: Path) -> tuple[ApiServer, str]:
        """Where a testbed's InferencePool lives: the cluster's own API server, in the testbed's namespace, its
        pods the Pods the kubelet runs (eppkit.components.inference_pool's real_pods)."""
        return self.cluster.pool_home(), self._namespace(run_dir)

    def pod_addresses(self, run_dir: Path):
        """Where the testbed's pool Pods are: the kit's node's block of its pod network (reserved once, given back
        at release); on a cluster of your own, where its network puts each Pod (learned)."""
        if run_dir not in self._addresses:
            self._addresses[run_dir] = self.cluster.pod_addresses(self._namespace(run_dir))
        return self._addresses[run_dir]

    def release(self, run_dir: Path) -> None:
        """The testbed stopped: its namespace goes (its Pods are gone already), and its pool Pods' addresses."""
        namespaces.delete_namespace(self._namespaces.pop(run_dir, namespaces.dns_label(Path(run_dir).name)),
                                    self.cluster.client(), wait_s=30.0)
        held = self._addresses.pop(run_dir, None)
        if held is not None:
            self.cluster.release_addresses(held)


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


def program_image(program: Path) -> str:
    """A program of this host in an image of its own (``eppkit/program-<its name>``), for a cluster of your own."""
    return images.program_image(program, f"program-{namespaces.dns_label(program.name)}", progress=say)


def pod_images() -> list[str]:
    """The images the Pods of a cluster of your own run, made or found now (what to load into its nodes): Envoy (the
    one installed with eppkit), Jaeger, the kit's services, and GAIE's EPP (once built) in an image of its own."""
    from eppkit.builds import gaie

    source = common.ImageSource()
    made = source.images()
    envoy = source.envoy_image(envoy_versions.resolve(None, say))
    built = gaie.find()
    return list(dict.fromkeys((envoy, made.jaeger, made.services, *([program_image(built)] if built else []))))


class KubernetesRuntime:
    """Pods of the kit's one-node cluster (`eppkit cluster up`), or of a cluster of yours (--kubeconfig), from the
    docker runtime's images: named, never one of `all`."""

    name, order = "kubernetes", 20
    capabilities = Capabilities(in_all=False, builds=("images",), cluster=True)

    def __init__(self, cluster: handle.Cluster | None = None) -> None:
        self._cluster = cluster  # None (the registered provider): the one the settings name, made when first asked

    def on(self, cluster: handle.Cluster) -> KubernetesRuntime:
        """This runtime on ``cluster`` (the handle made where the user named it)."""
        return KubernetesRuntime(cluster)

    @property
    def cluster(self) -> handle.Cluster:
        if self._cluster is None:
            self._cluster = handle.named()
        return self._cluster

    def available(self) -> tuple[bool, str]:
        ok, detail = common.engine_available()  # the pods' images are built by the Docker engine
        return self.cluster.available() if ok else (ok, detail)

    def sweep(self) -> str:
        gone = self.cluster.sweep()
        return f"removed {len(gone)} namespace(s) of eppkit sessions that died: {', '.join(gone)}" if gone else ""

    prepare = staticmethod(common.prepare_images)

    def launcher(self, image_set: images.ImageSet | None = None, kubeconfig: str | None = None) -> KubernetesLauncher:
        """``kubeconfig``: a cluster of your own for this launcher alone (else this runtime's cluster)."""
        return KubernetesLauncher(image_set, cluster=handle.named(kubeconfig) if kubeconfig else self.cluster)

    def leftovers(self) -> str:
        return common.session_leftovers(PODS, "pods", lambda p: f"{p.namespace}/{p.name}")

    # A dead worker's namespaces: its watchdog deletes them (eppkit.components.reaper), or the next session's sweep.
    workers_leftovers = staticmethod(common.nothing_left)

    def reaches_this_host(self) -> bool:
        """A cluster of your own whose node is another machine does not."""
        return self.cluster.reaches_this_host()


register(KubernetesRuntime())
