"""What a kit Pod does when its node is reached through the API server only (a cluster not started by the kit, or
the kit's own used as one): no ``ctr``, no kubelet log files, no host paths.

- **Files** it reads go in a ConfigMap of its own (``<pod>-files``), each file mounted by ``subPath`` at the same
  absolute path as on the host, so rendered configs need no rewriting (a ConfigMap holds at most 1 MiB); a folder
  it sees (its working folder, a cache) is an empty one of its own (``emptyDir``).
- **Its output** is followed through ``pods/log`` (the API serves it once the container runs).
- **Stop** is the Pod deleted with a grace period (its kubelet sends SIGTERM, on which Envoy, Jaeger and the kit's
  services flush and exit); **kill** is the Pod deleted at once (SIGKILL); **pause** cannot be done (it needs the
  node's container runtime).

Used by :class:`eppkit.cluster.pod.ManagedPod` when made with ``api_only=True``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

CONFIGMAP_LIMIT = 1 << 20  # what the API server takes in one ConfigMap (data and binaryData together)
PAUSE_UNAVAILABLE = ("freezing a Pod needs its node's container runtime (the cgroup freezer), which a cluster reached "
                     "by its API server alone does not offer")


class ApiPodError(RuntimeError):
    pass


def files_name(pod_name: str) -> str:
    return f"{pod_name}-files"[:253]


def file_volumes(pod_name: str, namespace: str, mounts: dict[str, str], labels: dict[str, str]):
    """(the ConfigMap or None, the volumes, the mounts) of the host paths a Pod sees: each file from the ConfigMap,
    by ``subPath`` at its own path; each folder an empty one of the Pod's own (emptyDir) at its path, for what the
    component writes there (a working folder, a cache), not shared with any other Pod."""
    import base64

    from lightkube.models.core_v1 import ConfigMapVolumeSource, EmptyDirVolumeSource, Volume, VolumeMount
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    binary, size, volumes, volume_mounts = {}, 0, [], []
    for i, path in enumerate(sorted(mounts)):
        source = Path(path)
        if source.is_dir():
            volumes.append(Volume(name=f"d{i}", emptyDir=EmptyDirVolumeSource()))
            volume_mounts.append(VolumeMount(name=f"d{i}", mountPath=path))
            continue
        data = source.read_bytes()
        size += len(data)
        key = f"f{i}-{source.name}"[:253]
        binary[key] = base64.b64encode(data).decode()
        volume_mounts.append(VolumeMount(name="files", mountPath=path, subPath=key, readOnly=True))
    if size > CONFIGMAP_LIMIT:
        raise ApiPodError(f"the files of pod {namespace}/{pod_name} are {size:,} bytes, over a ConfigMap's 1 MiB "
                          f"({', '.join(p for p in sorted(mounts) if not Path(p).is_dir())}): a cluster reached by its "
                          "API server cannot be given them (a dynamic module's .so is one such file)")
    if not binary:
        return None, volumes, volume_mounts
    name = files_name(pod_name)
    config_map = ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels=labels), binaryData=binary)
    return config_map, [Volume(name="files", configMap=ConfigMapVolumeSource(name=name)), *volumes], volume_mounts


def follow_log(client, pod_name: str, namespace: str, log_path: Path, ended, gone: threading.Event) -> None:
    """Copy the Pod's output into ``log_path`` as it comes, through the API (``pods/log?follow``); until the stream
    ends with the container, or ``gone`` is set. ``ended()``: the container has ended (or could not start)."""
    from lightkube import ApiError

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
            except ApiError:  # not started yet (ContainerCreating), or deleted
                pass
            except Exception:  # the stream broke: read again from the start, skipping what is copied
                pass
            if ended() is not None:
                return
            gone.wait(0.1)


def delete_pod(client, name: str, namespace: str, grace_s: int) -> None:
    """The Pod deleted with ``grace_s`` (0: at once); a Pod already gone is fine."""
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Pod

    try:
        client.delete(Pod, name, namespace=namespace, grace_period=grace_s)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


def delete_files(client, pod_name: str, namespace: str) -> None:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import ConfigMap

    try:
        client.delete(ConfigMap, files_name(pod_name), namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


def until_terminated(status_of, timeout_s: float) -> int | None:
    """Poll ``status_of()`` (the exit code, or None while it runs) until it says, the Pod is gone, or time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = status_of()
        if code is not None:
            return code
        time.sleep(0.1)
    return None
