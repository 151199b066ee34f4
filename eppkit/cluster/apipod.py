"""What a kit Pod does when its node is reached through the API server only (a cluster not started by the kit, or
the kit's own used as one): no ``ctr``, no kubelet log files, no host paths.

- **Files** it reads go in a ConfigMap of its own (``<pod>-files``), each file mounted by ``subPath`` at the same
  absolute path as on the host, so rendered configs need no rewriting; a file too large for one ConfigMap (1 MiB:
  a dynamic module's .so) goes in parts, put together by a helper container before the Pod's own starts; a folder
  it sees (its working folder, a cache) is an empty one of its own (``emptyDir``).
- **A live folder** (mode ``"live"``: Envoy's endpoint files, which the testbed rewrites as its pool changes) is a
  ConfigMap of its files mounted whole, brought up to date by :func:`refresh`: the ConfigMap changed, then the Pod
  touched (an annotation), on which its kubelet syncs it and swaps the folder's files at once (a rename Envoy's
  ``watched_directory`` sees), where its periodic sync would take up to a minute or more.
- **Its output** is followed through ``pods/log`` (the API serves it once the container runs).
- **Stop** is the Pod deleted with a grace period (its kubelet sends SIGTERM, on which Envoy, Jaeger and the kit's
  services flush and exit); **kill** is the Pod deleted at once (SIGKILL); **pause** cannot be done (it needs the
  node's container runtime).

:class:`ApiSite` is this for one :class:`eppkit.cluster.pod.ManagedPod` (its :class:`~eppkit.cluster.pod.PodSite`;
the kit's own node's is :class:`eppkit.cluster.nodepod.NodeSite`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CONFIGMAP_LIMIT = 1 << 20  # what the API server takes in one ConfigMap (data and binaryData together)
PART = 900 << 10  # a file larger than this goes in parts, a ConfigMap each, put together before the Pod starts
FILES_LIMIT = 32 << 20  # what the kit gives one Pod through the API at most
PARTS_DIR, WHOLE_DIR = "/eppkit-parts", "/eppkit-files"  # where the helper container sees the parts, writes the whole
LIVE = "live"  # a mount mode: a folder kept up to date from this host (refresh)
REFRESHED = "eppkit.io/refreshed"  # the annotation that makes a Pod's kubelet sync its live folders
PAUSE_UNAVAILABLE = ("freezing a Pod needs its node's container runtime (the cgroup freezer), which a cluster reached "
                     "by its API server alone does not offer")


class ApiPodError(RuntimeError):
    pass


@dataclass
class PodFiles:
    """What a Pod needs to see the host paths it reads (:func:`pod_files`): the ConfigMaps to create first, its
    volumes, the main container's mounts, and a helper container's command and mounts (None: no file needed
    putting together)."""

    config_maps: list = field(default_factory=list)
    volumes: list = field(default_factory=list)
    mounts: list = field(default_factory=list)
    assemble: tuple[list[str], list] | None = None
    live: dict[str, str] = field(default_factory=dict)  # a live folder -> its ConfigMap

    @property
    def names(self) -> list[str]:
        return [cm.metadata.name for cm in self.config_maps]


def pod_files(pod_name: str, namespace: str, mounts: dict[str, str], labels: dict[str, str]) -> PodFiles:
    """The host paths a Pod sees (module docstring): each small file from the Pod's ConfigMap (``<pod>-files``), by
    ``subPath`` at its own path; each larger one (over :data:`PART`, e.g. a dynamic module's .so) in parts, a
    ConfigMap each (``<pod>-big<k>-<j>``), put together by a helper container (``cat``, in ``helper_image``) into
    an empty folder the main container sees the whole file from, at its own path; each folder an empty one of the
    Pod's own (emptyDir) at its path, for what the component writes there, shared with no other Pod."""
    import base64

    from lightkube.models.core_v1 import ConfigMapVolumeSource, EmptyDirVolumeSource, Volume, VolumeMount
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    def config_map(name: str, data: dict[str, bytes]):
        meta = ObjectMeta(name=name[:253], namespace=namespace, labels=labels)
        return ConfigMap(metadata=meta, binaryData={k: base64.b64encode(v).decode() for k, v in data.items()})

    made, small, small_size, steps, helper_mounts = PodFiles(), {}, 0, [], []
    files = [path for path in sorted(mounts) if not Path(path).is_dir()]
    total = sum(Path(path).stat().st_size for path in files)
    if total > FILES_LIMIT:
        raise ApiPodError(f"the files of pod {namespace}/{pod_name} are {total:,} bytes, over the {FILES_LIMIT >> 20} "
                          f"MiB the kit gives a Pod through the API ({', '.join(files)})")
    for i, path in enumerate(sorted(mounts)):
        if mounts[path] == LIVE:  # a ConfigMap of its files, mounted whole: kept up to date (refresh)
            made.live[path] = f"{pod_name}-live{i}"[:253]
            made.config_maps.append(config_map(made.live[path], folder_files(path)))
            made.volumes.append(Volume(name=f"l{i}", configMap=ConfigMapVolumeSource(name=made.live[path])))
            made.mounts.append(VolumeMount(name=f"l{i}", mountPath=path, readOnly=True))
            continue
        if Path(path).is_dir():
            made.volumes.append(Volume(name=f"d{i}", emptyDir=EmptyDirVolumeSource()))
            made.mounts.append(VolumeMount(name=f"d{i}", mountPath=path))
            continue
        data = Path(path).read_bytes()
        if len(data) <= PART and small_size + len(data) <= PART:
            key = f"f{i}-{Path(path).name}"[:253]
            small[key], small_size = data, small_size + len(data)
            made.mounts.append(VolumeMount(name="files", mountPath=path, subPath=key, readOnly=True))
            continue
        parts = [data[at:at + PART] for at in range(0, len(data), PART)] or [b""]
        for j, part in enumerate(parts):
            made.config_maps.append(config_map(f"{pod_name}-big{i}-{j}", {"part": part}))
            made.volumes.append(Volume(name=f"b{i}-{j}", configMap=ConfigMapVolumeSource(
                name=made.config_maps[-1].metadata.name)))
            helper_mounts.append(VolumeMount(name=f"b{i}-{j}", mountPath=f"{PARTS_DIR}/{i}/{j}", readOnly=True))
        made.volumes.append(Volume(name=f"w{i}", emptyDir=EmptyDirVolumeSource()))
        helper_mounts.append(VolumeMount(name=f"w{i}", mountPath=f"{WHOLE_DIR}/{i}"))
        made.mounts.append(VolumeMount(name=f"w{i}", mountPath=path, subPath="file", readOnly=True))
        pieces = " ".join(f"{PARTS_DIR}/{i}/{j}/part" for j in range(len(parts)))
        steps.append(f"cat {pieces} > {WHOLE_DIR}/{i}/file && chmod 0755 {WHOLE_DIR}/{i}/file")
    if small:
        made.config_maps.insert(0, config_map(f"{pod_name}-files", small))
        source = ConfigMapVolumeSource(name=made.config_maps[0].metadata.name)
        made.volumes.insert(0, Volume(name="files", configMap=source))
    if steps:
        made.assemble = (["sh", "-c", " && ".join(steps)], helper_mounts)
    return made


def folder_files(folder: str | Path) -> dict[str, bytes]:
    """A live folder's files (not those being written: a name starting with a dot), by name."""
    return {f.name: f.read_bytes() for f in sorted(Path(folder).iterdir()) if f.is_file() and not f.name.startswith(".")}


def refresh(client, pod_name: str, namespace: str, config_map: str, folder: str | Path) -> None:
    """A live folder's ConfigMap given the folder's files now, then its Pod touched so that its kubelet puts them in
    the Pod at once (module docstring)."""
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import PatchType

    update_live(client, namespace, config_map, folder)
    client.patch(Pod, pod_name, {"metadata": {"annotations": {REFRESHED: str(time.time_ns())}}},
                 namespace=namespace, patch_type=PatchType.MERGE)


def update_live(client, namespace: str, config_map: str, folder: str | Path) -> None:
    """A live folder's ConfigMap given the folder's files now (a file gone from it, gone from it), its Pod untouched:
    its kubelet brings them at its next periodic sync."""
    import base64

    from lightkube.resources.core_v1 import ConfigMap
    from lightkube.types import PatchType

    data = {k: base64.b64encode(v).decode() for k, v in folder_files(folder).items()}
    old = client.get(ConfigMap, config_map, namespace=namespace).binaryData or {}
    client.patch(ConfigMap, config_map, {"binaryData": {**{k: None for k in old if k not in data}, **data}},
                 namespace=namespace, patch_type=PatchType.MERGE)


def follow_log(client, pod_name: str, namespace: str, log_path: Path, ended, gone: threading.Event) -> None:
    """Copy the Pod's output into ``log_path`` as it comes, through the API (``pods/log?follow``); until the stream
    ends with the container, or ``gone`` is set. ``ended()``: the container has ended (or could not start)."""
    written = 0  # lines already copied: a stream restarted after a break starts again from the first line
    with open(log_path, "a") as log:
        while not gone.is_set():
            try:
                for i, line in enumerate(client.log(pod_name, namespace=namespace, follow=True)):
                    if i >= written:
                        log.write(line)
                        log.flush()
                        written += 1
                    if gone.is_set():
                        return
            except Exception:  # not started yet (ContainerCreating), deleted, or the stream broke: read again from
                pass  # the start, skipping what is copied
            if ended() is not None:
                return
            gone.wait(0.1)


def _delete(client, kind, name: str, namespace: str, **options) -> None:
    """``kind`` ``name`` deleted; one already gone is fine."""
    from lightkube import ApiError

    try:
        client.delete(kind, name, namespace=namespace, **options)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


def delete_pod(client, name: str, namespace: str, grace_s: int) -> None:
    """The Pod deleted with ``grace_s`` (0: at once)."""
    from lightkube.resources.core_v1 import Pod

    _delete(client, Pod, name, namespace, grace_period=grace_s)


def delete_files(client, names: list[str], namespace: str) -> None:
    """The Pod's ConfigMaps (:attr:`PodFiles.names`)."""
    from lightkube.resources.core_v1 import ConfigMap

    for name in names:
        _delete(client, ConfigMap, name, namespace)


def until_terminated(status_of, timeout_s: float) -> int | None:
    """Poll ``status_of()`` (the exit code, or None while it runs) until it says, the Pod is gone, or time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = status_of()
        if code is not None:
            return code
        time.sleep(0.1)
    return None


class ApiSite:
    """A Pod on ``node`` of ``cluster`` (a handle), reached through its API server alone (module docstring): its
    files from ConfigMaps (a large one put together by a helper container of ``helper_image``), output through
    ``pods/log``, stopped and killed by deleting it, pulled by its node; ``forward``: (an ApiAccess, the ports)
    reached from this host's 127.0.0.1 on the same numbers once it runs (its node is another machine). One per
    Pod."""

    pull = "IfNotPresent"  # its node pulls what it lacks

    def __init__(self, cluster, node: str, helper_image: str | None = None, forward=None) -> None:
        self.cluster, self.node, self.helper_image = cluster, node, helper_image
        self.forward = forward
        self._config_maps: list[str] = []  # the ConfigMaps of its files, deleted with it
        self._live: dict[str, str] = {}  # a live folder -> its ConfigMap (refresh)
        self._forwards: list = []

    @property
    def client(self):
        return self.cluster.client()

    def files(self, pod) -> PodFiles:
        from eppkit.cluster.namespaces import pod_labels

        labels, _ = pod_labels(pod.name, **pod.extra_labels)
        return pod_files(pod.pod_name, pod.namespace, pod.mounts, labels)

    def security(self):
        """None: this host's uid means nothing on another machine."""

    def create(self, pod):
        files = self.files(pod)
        self._config_maps, self._live = files.names, files.live
        for config_map in files.config_maps:
            self.client.create(config_map)
        created = self.client.create(pod.manifest(files))
        if self.forward is not None:
            from eppkit.cluster.portforward import PortForward

            access, ports = self.forward
            self._forwards = [PortForward(access, pod.namespace, pod.pod_name, port, port).start() for port in ports]
        return created

    def follow(self, pod, created) -> threading.Thread:
        return threading.Thread(target=follow_log, name=f"logs-{pod.name}", daemon=True, args=(
            self.client, pod.pod_name, pod.namespace, pod.log_path, pod.terminated, pod.gone))

    def stop(self, pod, grace_s: float) -> int | None:
        """Its kubelet's SIGTERM, the grace period, then SIGKILL; its exit code (None: gone before it said)."""
        delete_pod(self.client, pod.pod_name, pod.namespace, max(1, round(grace_s)))
        code = until_terminated(lambda: pod.terminated(fresh=True, gone_code=-2), grace_s + 5.0)
        return None if code == -2 else code

    def kill(self, pod) -> int | None:
        """Deleted at once: it goes."""
        delete_pod(self.client, pod.pod_name, pod.namespace, 0)
        return 137

    def pause(self, pod) -> None:
        raise NotImplementedError(PAUSE_UNAVAILABLE)

    unpause = pause

    def refresh(self, pod, folder) -> None:
        name = self._live.get(str(Path(folder).resolve()))
        if name is not None:
            refresh(self.client, pod.pod_name, pod.namespace, name, folder)

    def deleted(self, pod) -> None:
        """Its forwards closed, its ConfigMaps deleted."""
        for forward in self._forwards:
            forward.close()
        self._forwards = []
        delete_files(self.client, self._config_maps, pod.namespace)
        self._config_maps = []

    def pid(self, pod) -> None:
        """None: no containerd of its node to ask."""
