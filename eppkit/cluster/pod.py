"""A kit component as a Pod: the kubernetes runtime's twin of ManagedProcess and ManagedContainer, with their
surface (``name``, ``log_path``, ``start``, ``wait_ready``, ``stop``, ``kill``, ``pause``, ``is_running``,
``returncode``, ``read_log``, ``log_tail``).

The Pod uses the host's network (hostNetwork: every component binds 127.0.0.1 itself, as on the other runtimes),
names its node (no scheduler round trip) and never restarts. What depends on how its node is reached is its
:class:`PodSite`, one of two, given by the cluster (:mod:`eppkit.cluster.handle`):

- on the kit's own node (:class:`eppkit.cluster.nodepod.NodeSite`): each host path it reads mounted at the same path
  (hostPath), its image imported into the node's containerd, its output copied from the kubelet's log file, stop
  and kill and pause through containerd (``ctr``);
- on a node reached through the API server alone (:class:`eppkit.cluster.apipod.ApiSite`: a cluster of your own,
  :mod:`eppkit.cluster.remote`): its files from ConfigMaps, its output through ``pods/log``, stop and kill by
  deleting it, its image pulled by its node, its ports forwarded from this host when that node is another machine.

Nothing outlives the kit: every Pod carries the kit's labels (its session, its owner) in the testbed's namespace;
each started Pod is registered and stopped at interpreter exit; a watchdog (:mod:`eppkit.components.reaper`) deletes
the session's namespaces when its process ends in any way (a SIGKILL too), and :func:`~eppkit.cluster.namespaces.sweep`
deletes those whose owner is gone (at the launcher's first use).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol, Sequence

from eppkit.cluster import apipod, handle, namespaces, podnet
from eppkit.cluster.namespaces import dns_label, pod_labels
from eppkit.cluster.nodepod import until_no_sandbox
from eppkit.components import reaper
from eppkit.components.base import FromImage, LiveSet
from eppkit.components.inference_pool import READY_GATE
from eppkit.components.owner import SESSION

_GONE = object()  # a Pod's status when the API no longer has the Pod
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients read their token
CLUSTER_DNS_SERVER = "https://kubernetes.default.svc"  # the API server by the cluster's DNS name


def in_cluster_kubeconfig(path: Path, server: str, namespace: str) -> Path:
    """A kubeconfig that holds no secret: the Pod's own ServiceAccount token and the cluster's CA by their files
    (:data:`SERVICE_ACCOUNT_DIR`), ``server``, ``namespace`` (what a program that asks for a kubeconfig file is
    given in place of one holding a user's credentials)."""
    from eppkit.components.pki import kubeconfig_json

    Path(path).write_text(kubeconfig_json(server, "in-cluster", namespace,
                                          {"certificate-authority": f"{SERVICE_ACCOUNT_DIR}/ca.crt"},
                                          {"tokenFile": f"{SERVICE_ACCOUNT_DIR}/token"}))
    return Path(path)


class PodSite(Protocol):
    """How a Pod's node is reached (module docstring); one per Pod."""

    node: str  # the node it runs on
    pull: str  # its imagePullPolicy
    helper_image: str | None  # what puts a large file's parts together (None: its own image)
    cluster: Any  # the cluster it is on (eppkit.cluster.handle.Cluster)
    client: Any  # that cluster's lightkube client

    def files(self, pod: "ManagedPod") -> apipod.PodFiles:
        """Its volumes and mounts for the host paths it reads."""
        ...

    def security(self) -> Any:
        """Its PodSecurityContext (None: the image's user)."""
        ...

    def create(self, pod: "ManagedPod") -> Any:
        """The Pod (and what it needs first) made in the API; the Pod made."""
        ...

    def follow(self, pod: "ManagedPod", created: Any) -> threading.Thread:
        """A thread (not started) copying its output into its log_path until it ends."""
        ...

    def stop(self, pod: "ManagedPod", grace_s: float) -> int | None:
        """Its program stopped gently within ``grace_s`` (the Pod is deleted after); its exit code."""
        ...

    def kill(self, pod: "ManagedPod") -> int | None:
        """Its program killed; the exit code to report (None: it was not running)."""
        ...

    def pause(self, pod: "ManagedPod") -> None: ...

    def unpause(self, pod: "ManagedPod") -> None: ...

    def refresh(self, pod: "ManagedPod", folder: str | Path) -> None:
        """A live folder's files brought up to date in the Pod."""
        ...

    def deleted(self, pod: "ManagedPod") -> None:
        """The Pod was deleted: what it had of its own besides goes."""
        ...

    def pid(self, pod: "ManagedPod") -> int | None: ...


class ManagedPod(FromImage):
    """One component in one Pod, started in a ``with``, logged to a file, always deleted (module docstring).
    ``site``: how its node is reached, as its cluster gives it (the launcher that makes it passes its cluster's; by
    default that of the cluster the settings name, else the kit's one-node cluster: :func:`handle.named`)."""

    def __init__(self, name: str, image: str, argv: Sequence[str], log_path: Path, *, namespace: str,
                 site: PodSite | None = None, entrypoint: Sequence[str] | None = None,
                 extra_labels: dict[str, str] | None = None):
        super().__init__(name, image, argv, log_path, entrypoint=entrypoint, extra_labels=extra_labels)
        self.namespace = namespace
        # made by hand (a test, a benchmark): on the cluster the settings name, reached as its Pods are
        self.site: PodSite = site or handle.named().site((), lambda: image)
        self.gone = threading.Event()  # set when the Pod is deleted: its log follower ends
        self.pod_name: str | None = None
        self._starts = 0
        self._follower: threading.Thread | None = None
        self._exit_code: int | None = None
        self._status_at = 0.0
        self._status = None
        self._reason_logged = False
        self.address: str | None = None  # on the pod network at this address (on_pod_network), else the host's
        self.on_network = False  # on the pod network (at ``address``, or where its network puts it: learned)
        self.dns_policy = "Default"  # the node's resolver; ClusterFirstWithHostNet: the cluster's DNS names too
        self._probe: tuple[str, int] | None = None
        self._service_account: str | None = None

    @property
    def client(self):
        return self.site.client

    def in_cluster(self, service_account: str, server: str | None) -> "ManagedPod":
        """A Kubernetes client in-cluster: ``service_account``'s token, the cluster's CA and its namespace where
        client libraries look (/var/run/secrets/kubernetes.io/serviceaccount), and the API server's address in
        ``KUBERNETES_SERVICE_HOST``/``PORT`` (a Pod on the host's network reaches it there; no Service is routed);
        ``server`` None: the address its kubelet gives it (the cluster's ``kubernetes`` Service)."""
        self._service_account = service_account
        self.env.pop("KUBECONFIG", None)
        if server is None:
            return self
        host, port = server.removeprefix("https://").rsplit(":", 1)
        return self.with_env(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)

    def on_pod_network(self, address: str | None, *, ready_path: str | None, port: int) -> "ManagedPod":
        """Not on the host's network: on the pod network (:mod:`eppkit.cluster.podnet`) at ``address``, Ready when
        its kubelet's readiness probe (``GET ready_path`` on ``port``, or a TCP connect, every second; 3 misses
        in a row make it not Ready) passes and the kit has set its readiness gate
        (:data:`~eppkit.components.inference_pool.READY_GATE`); the pool's labels are written when it joins the
        pool (InferencePoolObjects). ``address`` None: where the cluster's network
        puts it (a cluster of your own), its program told ``$(POD_IP)``, the address learned once it is ready
        (:attr:`learned_address`: its kubelet's probe said so, nothing of this host reached it)."""
        self.address, self._probe, self.on_network = address, (ready_path, port), True
        return self

    @property
    def learned_address(self) -> str | None:
        """The Pod's IP, when its network chose it (on_pod_network without an address) and the Pod has one."""
        if not self.on_network or self.address is not None:
            return None
        status = self._pod_status()
        return status.podIP if status is not None and status is not _GONE and status.podIP else None

    def wait_ready(self, strategy, hint: str = ""):
        """A Pod whose address its network chose: ready when its kubelet's readiness probe passes (this host may
        not reach the pod network); any other: ``strategy``."""
        if self.on_network and self.address is None:
            strategy = ProbePassed(self, strategy.timeout_s)
        return super().wait_ready(strategy, hint)

    # -- the Pod --------------------------------------------------------------------------------
    def manifest(self, files: apipod.PodFiles | None = None):
        """The Pod this component is (see the module docstring); ``files``: its site's for its host paths."""
        from lightkube.models.core_v1 import (ConfigMapProjection, Container, DownwardAPIProjection,
                                              DownwardAPIVolumeFile, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath,
                                              ObjectFieldSelector, PodReadinessGate, PodSpec, Probe,
                                              ProjectedVolumeSource, ServiceAccountTokenProjection, TCPSocketAction,
                                              Volume, VolumeMount, VolumeProjection)
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Pod

        lbls, notes = pod_labels(self.name, **self.extra_labels)
        files = files if files is not None else self.site.files(self)
        volumes, mounts = list(files.volumes), list(files.mounts)
        if self._service_account is not None:  # what the ServiceAccount admission plugin would add (it is off)
            volumes.append(Volume(name="kube-api-access", projected=ProjectedVolumeSource(sources=[
                VolumeProjection(serviceAccountToken=ServiceAccountTokenProjection(path="token",
                                                                                  expirationSeconds=3607)),
                VolumeProjection(configMap=ConfigMapProjection(name="kube-root-ca.crt",
                                                               items=[KeyToPath(key="ca.crt", path="ca.crt")])),
                VolumeProjection(downwardAPI=DownwardAPIProjection(items=[DownwardAPIVolumeFile(
                    path="namespace", fieldRef=ObjectFieldSelector(fieldPath="metadata.namespace"))]))])))
            mounts.append(VolumeMount(name="kube-api-access", mountPath=SERVICE_ACCOUNT_DIR, readOnly=True))
        env = [EnvVar(name=k, value=v) for k, v in {"PYTHONUNBUFFERED": "1", "HOME": "/tmp", **self.env}.items()]
        if self.on_network:  # what $(POD_IP) in its arguments becomes (its kubelet expands it)
            env.append(EnvVar(name="POD_IP", valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(
                fieldPath="status.podIP"))))
        # args: after the image's entrypoint (Jaeger's), or the whole command where it has none (the services');
        # command: an entrypoint of the launcher's own (Envoy's), as docker's --entrypoint
        probe = gates = None
        if self._probe is not None:  # on the pod network: its kubelet's probe, and the gate set_ready writes
            path, port = self._probe
            # Every second, as a kubelet's default does every 10 s: ready on the first pass, not ready after 3
            # misses in a row of 2 s each (one slow answer on a loaded 2-core node is no crash: with 1 and 1 it
            # emptied a pool mid-rollout in CI). A crash a test makes is written through the gate, not left to this.
            probe = Probe(httpGet=HTTPGetAction(path=path, port=port) if path else None,
                          tcpSocket=None if path else TCPSocketAction(port=port),
                          periodSeconds=1, timeoutSeconds=2, successThreshold=1, failureThreshold=3)
            gates = [PodReadinessGate(conditionType=READY_GATE)]
        pull = self.site.pull
        container = Container(name="main", image=self.image, imagePullPolicy=pull, command=self.entrypoint,
                              args=self.argv, env=env, volumeMounts=mounts or None, workingDir=self.cwd,
                              readinessProbe=probe)
        helpers = None
        if files.assemble is not None:  # a large file's parts put together before the main container starts
            command, helper_mounts = files.assemble
            helpers = [Container(name="files", image=self.site.helper_image or self.image,
                                 imagePullPolicy=pull, command=command, volumeMounts=helper_mounts)]
        return Pod(metadata=ObjectMeta(name=self.pod_name, namespace=self.namespace, labels=lbls, annotations=notes),
                   spec=PodSpec(nodeName=self.site.node, hostNetwork=not self.on_network, dnsPolicy=self.dns_policy,
                                restartPolicy="Never", readinessGates=gates,
                                enableServiceLinks=False, automountServiceAccountToken=False,
                                serviceAccountName=self._service_account,
                                terminationGracePeriodSeconds=5, containers=[container], initContainers=helpers,
                                volumes=volumes or None, securityContext=self.site.security()))

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "ManagedPod":
        # this process killed: its namespaces go all the same (remove_session, on this Pod's cluster)
        reaper.watch(__name__, SESSION, self.site.cluster.env())
        if self.site.cluster not in _clusters:
            _clusters.append(self.site.cluster)
        if self.pod_name is not None:  # started before (e.g. killed by a fault test): a fresh Pod
            self._delete()
        self.pod_name = dns_label(self.name if self._starts == 0 else f"{self.name}-r{self._starts}")
        self._starts += 1
        self._exit_code, self._status, self._reason_logged = None, None, False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _live.add(self)
        if self.address is not None:
            from eppkit.cluster import layout

            until_no_sandbox(self.namespace, self.pod_name)  # a Pod of this name before (a restarted pool pod):
            podnet.forget(self.address)  # its address freed first
            podnet.pin(layout().pins, self.namespace, self.pod_name, self.address)
        self.gone = threading.Event()
        try:
            created = self.site.create(self)
        except Exception as exc:
            _live.discard(self)
            raise RuntimeError(f"cannot create pod {self.namespace}/{self.pod_name} for {self.name}: {exc} "
                               f"(image {self.image})") from exc
        self._follower = self.site.follow(self, created)
        self._follower.start()
        return self

    def stop(self, grace_s: float = 5.0) -> int | None:
        """Its program stopped as its site does it, then the Pod deleted at once (module docstring); its exit
        code."""
        if self.pod_name is None:
            return None
        code = self.site.stop(self, grace_s)
        self._delete()
        return code

    def refresh(self, folder: str | Path) -> None:
        """``folder``'s files rewritten on this host: the Pod's copy brought up to date (a live folder of a Pod
        reached through the API, :mod:`eppkit.cluster.apipod`; on the kit's node it reads the host's folder)."""
        if self.pod_name is not None:
            self.site.refresh(self, folder)

    def kill(self) -> None:
        """Hard kill, for fault tests: no chance to flush. On the kit's node the Pod stays until stop(); reached
        through the API it goes at once."""
        if self.pod_name is None:
            return
        code = self.site.kill(self)
        if code is not None:
            self._exit_code = code

    def pause(self) -> None:
        """Freeze the component (cgroup freezer; its port still accepts connections), for fault tests."""
        self.site.pause(self)

    def unpause(self) -> None:
        self.site.unpause(self)

    def _delete(self) -> None:
        """Delete the Pod without waiting for it to go (the testbed's namespace waits once for all its Pods)."""
        name, self.pod_name = self.pod_name, None
        self.gone.set()
        apipod.delete_pod(self.client, name, self.namespace, 0)
        self.site.deleted(self)
        if self.address is not None:  # the CNI's DEL reads no address: the pin can go now
            from eppkit.cluster import layout

            podnet.unpin(layout().pins, self.namespace, name)
        if self._follower is not None:  # it copies what is left of its output, then ends (the Pod is gone)
            self._follower.join(timeout=2.0)
            self._follower = None
        _live.discard(self)

    # -- inspection ------------------------------------------------------------------------------
    def _pod_status(self, fresh: bool = False):
        """The Pod's status, read at most every 0.2 s (readiness asks for the return code every 50 ms)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        name = self.pod_name  # read once: its log follower asks while stop() may be clearing it
        if name is None:
            return None
        if fresh or time.monotonic() - self._status_at > 0.2:
            try:
                self._status = self.client.get(Pod, name, namespace=self.namespace).status
            except ApiError as exc:
                self._status = _GONE if exc.status.code == 404 else None
            self._status_at = time.monotonic()
        return self._status

    def _container_status(self, fresh: bool = False):
        status = self._pod_status(fresh)
        return (status.containerStatuses or [None])[0] if status is not None and status is not _GONE else status

    def terminated(self, fresh: bool = False, gone_code: int | None = None) -> int | None:
        """The exit code once the container has ended (-1: it could not start), else None; ``gone_code`` when the
        Pod is gone (a stop by deleting it: deleted before its status said)."""
        status = self._pod_status(fresh)  # read once: another thread may refresh self._status meanwhile
        if status is _GONE:
            return gone_code
        cs = (status.containerStatuses or [None])[0] if status is not None else None
        helper = next((c for c in (status.initContainerStatuses or []) if c.state and c.state.terminated
                       and c.state.terminated.exitCode != 0), None) if status is not None else None
        if helper is not None:  # the files' helper failed: the component never starts
            return self._failed_to_start(f"its files could not be put together ({helper.state.terminated.reason}, "
                                         f"exit {helper.state.terminated.exitCode})")
        if cs is None or cs.state is None:
            return None
        if cs.state.terminated is not None:
            return cs.state.terminated.exitCode
        waiting = cs.state.waiting
        if waiting is not None and waiting.reason in ("ErrImageNeverPull", "CreateContainerError",
                                                      "RunContainerError", "CreateContainerConfigError",
                                                      "ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            hint = (f" (its node {self.site.node} cannot pull {self.image}: load the kit's images there first, "
                    "e.g. `kind load docker-image` each, or push them where it pulls from: docs/kubernetes.md)"
                    if "Pull" in waiting.reason else "")
            return self._failed_to_start(f"{waiting.reason}: {waiting.message}{hint}")
        return None

    def _failed_to_start(self, why: str) -> int:
        """-1, its reason written to its log once (what readiness and the failure report show)."""
        if not self._reason_logged:
            self._reason_logged = True
            with open(self.log_path, "a") as log:
                log.write(f"pod {self.namespace}/{self.pod_name}: {why}\n")
        return -1

    @property
    def pid(self) -> int | None:
        """The host pid of the container's main process, or None (a node reached through the API alone)."""
        return self.site.pid(self)

    def returncode(self) -> int | None:
        if self._exit_code is None and self.pod_name is not None:
            self._exit_code = self.terminated()
        return self._exit_code

    def is_running(self) -> bool:
        return self.pod_name is not None and self.returncode() is None


class PodLauncher:
    """The program is an image's entrypoint in a Pod (Jaeger, Envoy): what
    :class:`~eppkit.components.launchers.ContainerLauncher` is on docker (a
    :class:`~eppkit.components.launchers.Launcher`; it lives here, beside ManagedPod, as the cluster's layer is above
    the components'). ``site``: how each Pod made is placed and reached, given the ports the kit reaches it on
    (:attr:`ports`)."""

    def __init__(self, image: str, namespace: str, site, *, entrypoint=None, labels=None):
        self.image, self.namespace, self.site, self.entrypoint = image, namespace, site, entrypoint
        self.labels = labels or {}
        self.ports: tuple[int, ...] = ()  # the ports the kit reaches it on
        self.live: set[Path] = set()  # folders given as live ones (apipod.LIVE: kept up to date from this host)

    def make(self, name, args, log_path, *, env=None, mounts=()) -> ManagedPod:
        made = ManagedPod(name, self.image, list(map(str, args)), log_path, namespace=self.namespace,
                          site=self.site(self.ports), entrypoint=self.entrypoint,
                          extra_labels=self.labels).with_env(**(env or {}))
        for path in mounts:
            made.with_mount(path, apipod.LIVE if Path(path) in self.live else "ro")
        return made


class ProbePassed:
    """Ready when the Pod's kubelet says its readiness probe passed (its container ready) and it has an IP."""

    poll_interval_s = 0.1

    def __init__(self, pod: ManagedPod, timeout_s: float) -> None:
        self.pod, self.timeout_s = pod, timeout_s

    def describe(self) -> str:
        return f"pod {self.pod.namespace}/{self.pod.pod_name}: its kubelet's readiness probe passed"

    def is_ready(self, process) -> bool:
        cs = self.pod._container_status()
        return cs is not None and cs is not _GONE and bool(cs.ready) and self.pod.learned_address is not None


_clusters: list = []  # the clusters this process made Pods on


def remove_session(session: str = SESSION) -> list[str]:
    """The namespaces of ``session`` still there on the clusters this process made Pods on (a watchdog: on the
    cluster its spawn environment names, read as its settings), deleted: the leak check's and the watchdog's look
    (:func:`eppkit.cluster.namespaces.remove_session`)."""
    return [name for cluster in (_clusters or [handle.named()])
            for name in namespaces.remove_session(session, cluster.client())]


_live: LiveSet[ManagedPod] = LiveSet(grace_s=1.0)
stop_all = _live.stop_all


def live() -> list[ManagedPod]:
    return _live.snapshot()
