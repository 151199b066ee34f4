"""A kit component as a Pod of the one-node cluster (:mod:`eppkit.cluster`): the kubernetes runtime's twin of
ManagedProcess and ManagedContainer, with their surface (``name``, ``log_path``, ``start``, ``wait_ready``,
``stop``, ``kill``, ``pause``, ``is_running``, ``returncode``, ``read_log``, ``log_tail``).

The Pod uses the host's network (hostNetwork: every component binds 127.0.0.1 itself, as on the other runtimes),
names its node (no scheduler round trip), never restarts, and mounts each host path it reads at the same path
(hostPath), so rendered configs need no rewriting. Its image is imported into the node's containerd, never
pulled (``imagePullPolicy: Never``). Its output is copied from the kubelet's log file of its container into
``log_path`` (what readiness and the failure reports read).

Stop is ManagedProcess's: SIGINT to the container (Envoy and the kit's services flush on it), a bounded wait, then
the Pod deleted at once; kill is SIGKILL (the Pod stays until stop, as a killed container does). Both signal the
container's task through containerd (``ctr``): the node is this machine's.

On a cluster reached by its API server alone (``api_only``: a cluster of your own, :mod:`eppkit.cluster.remote`)
the same Pod is made without what only the kit's own node gives (:mod:`eppkit.cluster.apipod`): its files from
ConfigMaps, its output through ``pods/log``, stop and kill by deleting it, its image pulled by its node, its ports
forwarded from this host when asked (:meth:`ManagedPod.forward_ports`).

Nothing outlives the kit: every Pod carries the kit's labels (its session, its owner) in the testbed's namespace;
each started Pod is registered and stopped at interpreter exit; a watchdog (:mod:`eppkit.components.reaper`) deletes
the session's namespaces when its process ends in any way (a SIGKILL too), and :func:`~eppkit.cluster.namespaces.sweep`
deletes those whose owner is gone (at the launcher's first use).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Sequence

from eppkit.cluster import apipod, namespaces, podnet
from eppkit.cluster.configs import NODE
from eppkit.cluster.images import ctr
from eppkit.cluster.namespaces import client, dns_label, pod_labels, remove_session  # noqa: F401 (leak check)
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


def pod_logs() -> Path:
    """Where the node's kubelet writes its containers' logs (its podLogsDir)."""
    from eppkit.cluster import layout

    return layout().pod_logs


def cri_line(line: bytes) -> bytes:
    """One line of a CRI log file (``<time> <stream> <F|P> <text>``) as the program wrote it: a full line ends with
    a newline, a partial one (P) runs on into the next."""
    parts = line.split(b" ", 3)
    if len(parts) < 4:
        return line + b"\n"
    return parts[3] + (b"" if parts[2] == b"P" else b"\n")


class ManagedPod(FromImage):
    """One component in one Pod, started in a ``with``, logged to a file, always deleted (module docstring)."""

    def __init__(self, name: str, image: str, argv: Sequence[str], log_path: Path, *, namespace: str,
                 entrypoint: Sequence[str] | None = None, extra_labels: dict[str, str] | None = None,
                 api_only: bool = False, node: str | None = None):
        super().__init__(name, image, argv, log_path, entrypoint=entrypoint, extra_labels=extra_labels)
        self.namespace = namespace
        # api_only: its node reached through the API server alone (eppkit.cluster.apipod): files in a ConfigMap,
        # output through pods/log, stop and kill by deleting the Pod, no pause; ``node``: the node it runs on
        self.api_only = api_only
        self.node = node or NODE
        self._forward: tuple[object, tuple[int, ...]] | None = None  # (ApiAccess, ports) forwarded from this host
        self._forwards: list = []
        self._config_maps: list[str] = []  # api_only: the ConfigMaps of its files, deleted with it
        self._live_folders: dict[str, str] = {}  # api_only: a live folder -> its ConfigMap (refresh)
        self.helper_image: str | None = None  # api_only: the image that puts a large file together (it has sh, cat)
        self._gone = threading.Event()  # set when the Pod is deleted: the API log follower ends
        self.pod_name: str | None = None
        self._starts = 0
        self._follower: threading.Thread | None = None
        self._exit_code: int | None = None
        self._status_at = 0.0
        self._status = None
        self._reason_logged = False
        self._cid = ""  # its containerd id, once known (_container_id)
        self.address: str | None = None  # on the pod network at this address (on_pod_network), else the host's
        self.on_network = False  # on the pod network (at ``address``, or where its network puts it: learned)
        self.dns_policy = "Default"  # the node's resolver; ClusterFirstWithHostNet: the cluster's DNS names too
        self._probe: tuple[str, int] | None = None
        self._service_account: str | None = None

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
        its kubelet's readiness probe (``GET ready_path`` on ``port``, or a TCP connect, every second) passes and
        the kit has set its readiness gate (:data:`~eppkit.components.inference_pool.READY_GATE`); the pool's labels
        are written when it joins the pool (InferencePoolObjects). ``address`` None: where the cluster's network
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

    def forward_ports(self, access, ports) -> "ManagedPod":
        """Once started, each of ``ports`` reached at this host's 127.0.0.1 on the same number, through the API
        server (:mod:`eppkit.cluster.portforward`): its node is another machine."""
        self._forward = (access, tuple(sorted(set(ports))))
        return self

    # -- the Pod --------------------------------------------------------------------------------
    def manifest(self, files: apipod.PodFiles | None = None):
        """The Pod this component is (see the module docstring)."""
        from lightkube.models.core_v1 import (ConfigMapProjection, Container, DownwardAPIProjection,
                                              DownwardAPIVolumeFile, EnvVar, EnvVarSource, HostPathVolumeSource,
                                              HTTPGetAction, KeyToPath, ObjectFieldSelector, PodReadinessGate,
                                              PodSecurityContext, PodSpec, Probe, ProjectedVolumeSource,
                                              ServiceAccountTokenProjection, TCPSocketAction, Volume, VolumeMount,
                                              VolumeProjection)
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Pod

        lbls, notes = pod_labels(self.name, **self.extra_labels)
        files = files or apipod.PodFiles()  # api_only: files from ConfigMaps, folders its own (apipod.pod_files)
        volumes, mounts = list(files.volumes), list(files.mounts)
        for i, (path, mode) in enumerate(() if self.api_only else sorted(self.mounts.items())):
            kind = "Directory" if Path(path).is_dir() else "File"
            volumes.append(Volume(name=f"v{i}", hostPath=HostPathVolumeSource(path=path, type=kind)))
            mounts.append(VolumeMount(name=f"v{i}", mountPath=path, readOnly=mode == "ro"))
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
            probe = Probe(httpGet=HTTPGetAction(path=path, port=port) if path else None,
                          tcpSocket=None if path else TCPSocketAction(port=port),
                          periodSeconds=1, timeoutSeconds=1, successThreshold=1, failureThreshold=1)
            gates = [PodReadinessGate(conditionType=READY_GATE)]
        # an image the kit imported into its own node is never pulled; elsewhere the node pulls what it lacks
        pull = "IfNotPresent" if self.api_only else "Never"
        container = Container(name="main", image=self.image, imagePullPolicy=pull, command=self.entrypoint,
                              args=self.argv, env=env, volumeMounts=mounts or None, workingDir=self.cwd,
                              readinessProbe=probe)
        helpers = None
        if files.assemble is not None:  # a large file's parts put together before the main container starts
            command, helper_mounts = files.assemble
            helpers = [Container(name="files", image=self.helper_image or self.image, imagePullPolicy=pull,
                                 command=command, volumeMounts=helper_mounts)]
        return Pod(metadata=ObjectMeta(name=self.pod_name, namespace=self.namespace, labels=lbls, annotations=notes),
                   spec=PodSpec(nodeName=self.node, hostNetwork=not self.on_network,
                                dnsPolicy=self.dns_policy,
                                restartPolicy="Never", readinessGates=gates,
                                enableServiceLinks=False, automountServiceAccountToken=False,
                                serviceAccountName=self._service_account,
                                terminationGracePeriodSeconds=5, containers=[container], initContainers=helpers,
                                volumes=volumes or None,
                                securityContext=None if self.api_only else PodSecurityContext(
                                    runAsUser=os.getuid(), runAsGroup=os.getgid())))

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "ManagedPod":
        reaper.watch(namespaces.__name__, SESSION)  # this process killed: its namespaces go all the same
        if self.pod_name is not None:  # started before (e.g. killed by a fault test): a fresh Pod
            self._delete()
        self.pod_name = dns_label(self.name if self._starts == 0 else f"{self.name}-r{self._starts}")
        self._starts += 1
        self._exit_code, self._status, self._reason_logged, self._cid = None, None, False, ""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _live.add(self)
        if self.address is not None:
            from eppkit.cluster import layout

            self._until_no_sandbox()  # a Pod of this name before (a restarted pool pod): its address freed first
            podnet.forget(self.address)
            podnet.pin(layout().pins, self.namespace, self.pod_name, self.address)
        self._gone = threading.Event()
        try:
            if self.api_only:
                lbls, _ = pod_labels(self.name, **self.extra_labels)
                files = apipod.pod_files(self.pod_name, self.namespace, self.mounts, lbls)
                self._config_maps, self._live_folders = files.names, files.live
                for config_map in files.config_maps:
                    client().create(config_map)
                created = client().create(self.manifest(files))
            else:
                created = client().create(self.manifest())
        except Exception as exc:
            _live.discard(self)
            raise RuntimeError(f"cannot create pod {self.namespace}/{self.pod_name} for {self.name}: {exc} "
                               f"(image {self.image})") from exc
        if self._forward is not None:
            from eppkit.cluster.portforward import PortForward

            access, ports = self._forward
            self._forwards = [PortForward(access, self.namespace, self.pod_name, port, port).start() for port in ports]
        if self.api_only:
            self._follower = threading.Thread(target=apipod.follow_log, name=f"logs-{self.name}", daemon=True,
                                              args=(client(), self.pod_name, self.namespace, self.log_path,
                                                    self._terminated, self._gone))
            self._follower.start()
            return self
        cri_log = pod_logs() / f"{self.namespace}_{self.pod_name}_{created.metadata.uid}" / "main" / "0.log"
        self._follower = threading.Thread(target=self._copy_output, args=(self.pod_name, cri_log),
                                          name=f"logs-{self.name}", daemon=True)
        self._follower.start()
        return self

    def _copy_output(self, pod_name: str, cri_log: Path) -> None:
        """Copy the container's output into log_path as it comes (what readiness and the failure reports read).

        Read from the kubelet's own log file of the container (the node is this machine's), in the CRI format
        (``<time> <stream> <F|P> <text>``): the API serves a container's log only once the kubelet's relist has
        seen it running, up to a second after it started, and Envoy's readiness reads its log."""
        with open(self.log_path, "ab", buffering=0) as log:
            source, pending, checked = None, b"", 0.0
            while True:
                gone = self.pod_name != pod_name
                if source is None:
                    try:
                        source = open(cri_log, "rb")
                    except OSError:  # not created yet, or never will be (its reason is logged)
                        if gone or self._terminated() is not None:
                            return
                        time.sleep(0.02)
                        continue
                chunk = source.read()
                if chunk:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        log.write(cri_line(line))
                    continue
                if gone:
                    source.close()
                    return
                if time.monotonic() - checked > 0.5:  # the API, at most twice a second: has it ended?
                    checked = time.monotonic()
                    if self._terminated() is not None:
                        source.close()
                        return
                time.sleep(0.05)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGINT, a bounded wait, then the Pod deleted at once (module docstring); its exit code."""
        if self.pod_name is None:
            return None
        if self.api_only:  # its kubelet's SIGTERM, the grace period, then SIGKILL
            apipod.delete_pod(client(), self.pod_name, self.namespace, max(1, round(grace_s)))
            code = apipod.until_terminated(lambda: self._terminated(fresh=True, gone_code=-2), grace_s + 5.0)
            self._delete()
            return None if code == -2 else code
        container = self._container_id()
        if container and self._task(container) == "RUNNING":
            self._ctr("tasks", "kill", "-s", "SIGINT", container)
            self._until_stopped(container, grace_s)
        code = self._terminated(fresh=True)
        # Its container has ended: the Pod object goes when the kubelet has removed its sandbox (up to a second),
        # which the testbed's namespace waits for once for all its Pods (delete_namespace).
        self._delete()
        return code

    def refresh(self, folder: str | Path) -> None:
        """``folder``'s files rewritten on this host: the Pod's copy brought up to date (a live folder of an api_only
        Pod, :mod:`eppkit.cluster.apipod`; elsewhere it reads the host's folder itself)."""
        name = self._live_folders.get(str(Path(folder).resolve()))
        if name is not None and self.pod_name is not None:
            apipod.refresh(client(), self.pod_name, self.namespace, name, folder)

    def kill(self) -> None:
        """Hard kill, for fault tests: no chance to flush. The Pod stays until stop() (api_only: it goes at once)."""
        if self.api_only:
            if self.pod_name is not None:
                apipod.delete_pod(client(), self.pod_name, self.namespace, 0)
                self._exit_code = 137
            return
        container = self._container_id()
        if container and self._task(container) == "RUNNING":
            self._ctr("tasks", "kill", "-s", "SIGKILL", container)
            self._until_stopped(container, 10.0)
            self._exit_code = 137  # what the API reports once the kubelet has seen it (up to a second later)

    def pause(self) -> None:
        """Freeze the component (cgroup freezer; its port still accepts connections), for fault tests."""
        if self.api_only:
            raise NotImplementedError(apipod.PAUSE_UNAVAILABLE)
        self._ctr("tasks", "pause", self._container_id())

    def unpause(self) -> None:
        if self.api_only:
            raise NotImplementedError(apipod.PAUSE_UNAVAILABLE)
        self._ctr("tasks", "resume", self._container_id())

    def _until_no_sandbox(self, timeout_s: float = 15.0) -> None:
        """Until no sandbox of this Pod's name runs (the kubelet stops one, its network torn down first, a second
        or so after its Pod was deleted; until then its network namespace holds the address)."""
        sandboxes = set(self._cri_containers("sandbox"))
        deadline = time.monotonic() + timeout_s
        while sandboxes and time.monotonic() < deadline:
            running = {cols[0] for line in self._ctr("tasks", "ls").stdout.splitlines()[1:]
                       if len(cols := line.split()) >= 3 and cols[2] != "STOPPED"}
            if not sandboxes & running:
                return
            time.sleep(0.1)

    def _task_row(self, container: str) -> tuple[int, str] | None:
        """The container's task as containerd says it, at once (its pid, and RUNNING, STOPPED, PAUSED): the API
        hears of it only at the kubelet's next relist (up to a second)."""
        for line in self._ctr("tasks", "ls").stdout.splitlines()[1:]:
            cols = line.split()
            if len(cols) >= 3 and cols[0] == container:
                return int(cols[1]), cols[2]
        return None

    def _task(self, container: str) -> str | None:
        row = self._task_row(container)
        return row[1] if row else None

    def _until_stopped(self, container: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._task(container) in ("RUNNING", "PAUSED", "PAUSING"):
            time.sleep(0.02)

    @staticmethod
    def _ctr(*args: str) -> subprocess.CompletedProcess:
        from eppkit.cluster import layout

        socket = layout().containerd_socket
        return subprocess.run([*ctr(socket), *args], capture_output=True, text=True, timeout=30)

    def _delete(self) -> None:
        """Delete the Pod without waiting for it to go (the testbed's namespace waits once for all its Pods)."""
        name, self.pod_name = self.pod_name, None
        self._gone.set()
        for forward in self._forwards:
            forward.close()
        self._forwards = []
        apipod.delete_pod(client(), name, self.namespace, 0)
        if self.api_only:
            apipod.delete_files(client(), self._config_maps, self.namespace)
            self._config_maps = []
        if self.address is not None:  # the CNI's DEL reads no address: the pin can go now
            from eppkit.cluster import layout

            podnet.unpin(layout().pins, self.namespace, name)
        if self._follower is not None:  # it copies what is left of the log file, then ends (the Pod is gone)
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
                self._status = client().get(Pod, name, namespace=self.namespace).status
            except ApiError as exc:
                self._status = _GONE if exc.status.code == 404 else None
            self._status_at = time.monotonic()
        return self._status

    def _container_status(self, fresh: bool = False):
        status = self._pod_status(fresh)
        return (status.containerStatuses or [None])[0] if status is not None and status is not _GONE else status

    def _container_id(self) -> str:
        """The Pod's container, asked of containerd by the CRI's labels: it knows the container as soon as it is
        created, while the API's status names it only after the kubelet's next relist (up to a second; a pid or a
        stop asked in between found nothing)."""
        if self.pod_name is None or self.api_only:  # api_only: no containerd of its node to ask
            return ""
        if not self._cid:  # one container per Pod (restartPolicy Never): found once
            found = self._cri_containers("container")
            self._cid = found[0] if found else ""
        return self._cid

    def _cri_containers(self, kind: str) -> list[str]:
        """containerd's ids of this Pod's ``kind`` ("container", "sandbox"), by the labels the CRI gives them."""
        match = ",".join([f'labels."io.kubernetes.pod.namespace"=={self.namespace}',
                          f'labels."io.kubernetes.pod.name"=={self.pod_name}', f'labels."io.cri-containerd.kind"=={kind}'])
        return self._ctr("containers", "ls", "-q", match).stdout.split()

    def _terminated(self, fresh: bool = False, gone_code: int | None = None) -> int | None:
        """The exit code once the container has ended (-1: it could not start), else None; ``gone_code`` when the
        Pod is gone (api_only's stop: deleted before its status said)."""
        status = self._pod_status(fresh)  # read once: another thread may refresh self._status meanwhile
        if status is _GONE:
            return gone_code
        cs = (status.containerStatuses or [None])[0] if status is not None else None
        helper = next((c for c in (status.initContainerStatuses or []) if c.state and c.state.terminated
                       and c.state.terminated.exitCode != 0), None) if status is not None else None
        if helper is not None:  # the files' helper failed: the component never starts
            if not self._reason_logged:
                self._reason_logged = True
                with open(self.log_path, "a") as log:
                    log.write(f"pod {self.namespace}/{self.pod_name}: its files could not be put together "
                              f"({helper.state.terminated.reason}, exit {helper.state.terminated.exitCode})\n")
            return -1
        if cs is None or cs.state is None:
            return None
        if cs.state.terminated is not None:
            return cs.state.terminated.exitCode
        waiting = cs.state.waiting
        if waiting is not None and waiting.reason in ("ErrImageNeverPull", "CreateContainerError",
                                                      "RunContainerError", "CreateContainerConfigError",
                                                      "ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            if not self._reason_logged:  # what readiness and the failure report show, once
                self._reason_logged = True
                hint = (f" (its node {self.node} cannot pull {self.image}: load the kit's images there first, "
                        "e.g. `kind load docker-image` each, or push them where it pulls from: docs/kubernetes.md)"
                        if "Pull" in waiting.reason else "")
                with open(self.log_path, "a") as log:
                    log.write(f"pod {self.namespace}/{self.pod_name}: {waiting.reason}: {waiting.message}{hint}\n")
            return -1
        return None

    @property
    def pid(self) -> int | None:
        """The host pid of the container's main process, or None."""
        container = self._container_id()
        row = self._task_row(container) if container else None
        return row[0] if row else None

    def returncode(self) -> int | None:
        if self._exit_code is None and self.pod_name is not None:
            self._exit_code = self._terminated()
        return self._exit_code

    def is_running(self) -> bool:
        return self.pod_name is not None and self.returncode() is None


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


_live: LiveSet[ManagedPod] = LiveSet(grace_s=1.0)
stop_all = _live.stop_all


def live() -> list[ManagedPod]:
    return _live.snapshot()
