"""What a kit Pod does on the kit's own node (:mod:`eppkit.cluster`, this machine's): the twin of
:mod:`eppkit.cluster.apipod` (a node reached through the API server alone), one :class:`~eppkit.cluster.pod.PodSite`.

- **Files** it reads are mounted from this host at the same path (hostPath), so rendered configs need no rewriting;
  it runs as this host's user.
- **Its image** was imported into the node's containerd, never pulled (``imagePullPolicy: Never``).
- **Its output** is copied from the kubelet's log file of its container (the API serves a container's log only once
  the kubelet's relist has seen it running, up to a second after it started, and Envoy's readiness reads its log).
- **Stop** is ManagedProcess's: SIGINT to the container's task (Envoy and the kit's services flush on it), a bounded
  wait, then the Pod deleted at once; **kill** is SIGKILL (the Pod stays until stop, as a killed container does);
  **pause** is the cgroup freezer. All through containerd (``ctr``), which knows a container as soon as it is
  created, where the API hears of it only at the kubelet's next relist.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from eppkit.cluster import apipod
from eppkit.cluster.configs import NODE
from eppkit.cluster.images import ctr


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


def ctr_run(*args: str) -> subprocess.CompletedProcess:
    """``ctr`` against the node's containerd."""
    from eppkit.cluster import layout

    return subprocess.run([*ctr(layout().containerd_socket), *args], capture_output=True, text=True, timeout=30)


def cri_containers(namespace: str, pod_name: str, kind: str) -> list[str]:
    """containerd's ids of a Pod's ``kind`` ("container", "sandbox"), by the labels the CRI gives them."""
    match = ",".join([f'labels."io.kubernetes.pod.namespace"=={namespace}',
                      f'labels."io.kubernetes.pod.name"=={pod_name}', f'labels."io.cri-containerd.kind"=={kind}'])
    return ctr_run("containers", "ls", "-q", match).stdout.split()


def task_row(container: str) -> tuple[int, str] | None:
    """The container's task as containerd says it, at once (its pid, and RUNNING, STOPPED, PAUSED)."""
    for line in ctr_run("tasks", "ls").stdout.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[0] == container:
            return int(cols[1]), cols[2]
    return None


def until_no_sandbox(namespace: str, pod_name: str, timeout_s: float = 15.0) -> None:
    """Until no sandbox of this Pod's name runs (the kubelet stops one, its network torn down first, a second or so
    after its Pod was deleted; until then its network namespace holds the address)."""
    sandboxes = set(cri_containers(namespace, pod_name, "sandbox"))
    deadline = time.monotonic() + timeout_s
    while sandboxes and time.monotonic() < deadline:
        running = {cols[0] for line in ctr_run("tasks", "ls").stdout.splitlines()[1:]
                   if len(cols := line.split()) >= 3 and cols[2] != "STOPPED"}
        if not sandboxes & running:
            return
        time.sleep(0.1)


class NodeSite:
    """A Pod on the kit's own node (module docstring); one per Pod (it knows its container once found)."""

    pull = "Never"  # imported into the node's containerd by the launcher
    helper_image = None  # no file is put together: each is mounted from the host

    def __init__(self, cluster, node: str = NODE) -> None:
        self.cluster, self.node = cluster, node  # the kit's one-node cluster (eppkit.cluster.handle.KitCluster)
        self._cid = ""  # its containerd id, once known

    @property
    def client(self):
        return self.cluster.client()

    def files(self, pod) -> apipod.PodFiles:
        """Each host path it reads, mounted at its own path."""
        from lightkube.models.core_v1 import HostPathVolumeSource, Volume, VolumeMount

        made = apipod.PodFiles()
        for i, (path, mode) in enumerate(sorted(pod.mounts.items())):
            kind = "Directory" if Path(path).is_dir() else "File"
            made.volumes.append(Volume(name=f"v{i}", hostPath=HostPathVolumeSource(path=path, type=kind)))
            made.mounts.append(VolumeMount(name=f"v{i}", mountPath=path, readOnly=mode == "ro"))
        return made

    def security(self):
        from lightkube.models.core_v1 import PodSecurityContext

        return PodSecurityContext(runAsUser=os.getuid(), runAsGroup=os.getgid())

    def create(self, pod):
        self._cid = ""
        return self.client.create(pod.manifest(self.files(pod)))

    def follow(self, pod, created) -> threading.Thread:
        cri_log = pod_logs() / f"{pod.namespace}_{pod.pod_name}_{created.metadata.uid}" / "main" / "0.log"
        return threading.Thread(target=self._copy_output, args=(pod, pod.pod_name, cri_log), name=f"logs-{pod.name}",
                                daemon=True)

    @staticmethod
    def _copy_output(pod, pod_name: str, cri_log: Path) -> None:
        """Copy the container's output into the pod's log_path as it comes, from the kubelet's own log file of it
        (module docstring), in the CRI format."""
        with open(pod.log_path, "ab", buffering=0) as log:
            source, pending, checked = None, b"", 0.0
            while True:
                gone = pod.pod_name != pod_name
                if source is None:
                    try:
                        source = open(cri_log, "rb")
                    except OSError:  # not created yet, or never will be (its reason is logged)
                        if gone or pod.terminated() is not None:
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
                    if pod.terminated() is not None:
                        source.close()
                        return
                time.sleep(0.05)

    def container(self, pod) -> str:
        """The Pod's container, asked of containerd by the CRI's labels (found once: one per Pod)."""
        if pod.pod_name is None:
            return ""
        if not self._cid:
            found = cri_containers(pod.namespace, pod.pod_name, "container")
            self._cid = found[0] if found else ""
        return self._cid

    def _task(self, container: str) -> str | None:
        row = task_row(container)
        return row[1] if row else None

    def _until_stopped(self, container: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._task(container) in ("RUNNING", "PAUSED", "PAUSING"):
            time.sleep(0.02)

    def stop(self, pod, grace_s: float) -> int | None:
        """SIGINT, a bounded wait; its exit code. Its container has ended: the Pod object goes when the kubelet has
        removed its sandbox (up to a second), which the testbed's namespace waits for once for all its Pods."""
        container = self.container(pod)
        if container and self._task(container) == "RUNNING":
            ctr_run("tasks", "kill", "-s", "SIGINT", container)
            self._until_stopped(container, grace_s)
        return pod.terminated(fresh=True)

    def kill(self, pod) -> int | None:
        """SIGKILL; the exit code the API reports once the kubelet has seen it (up to a second later), or None."""
        container = self.container(pod)
        if container and self._task(container) == "RUNNING":
            ctr_run("tasks", "kill", "-s", "SIGKILL", container)
            self._until_stopped(container, 10.0)
            return 137
        return None

    def pause(self, pod) -> None:
        ctr_run("tasks", "pause", self.container(pod))

    def unpause(self, pod) -> None:
        ctr_run("tasks", "resume", self.container(pod))

    def refresh(self, pod, folder) -> None:
        """Nothing: the Pod reads the host's folder itself."""

    def deleted(self, pod) -> None:
        """Nothing of its own besides the Pod."""

    def pid(self, pod) -> int | None:
        container = self.container(pod)
        row = task_row(container) if container else None
        return row[0] if row else None
