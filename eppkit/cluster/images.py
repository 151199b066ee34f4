"""Images on the one-node cluster: nothing is pulled. The pause image is made here from the kit's static pause
binary, and every image goes into containerd's ``k8s.io`` namespace with ``ctr images import`` (a docker-archive
tar: Python's tarfile writes the pause one, ``docker save`` the kit's others); pods name them with
``imagePullPolicy: Never``."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

NAMESPACE = "k8s.io"  # containerd's namespace of the CRI plugin


def ctr(socket: Path) -> list[str]:
    """The `ctr` command line for the node's containerd, in the CRI plugin's namespace."""
    return ["ctr", "--address", str(socket), "--namespace", NAMESPACE]


def pause_tag(binary: Path) -> str:
    """The pause image's name, after its binary's content (a rebuilt binary is another image)."""
    return f"localhost/eppkit-pause:{hashlib.sha256(binary.read_bytes()).hexdigest()[:12]}"


def docker_archive(binary: Path, tag: str, entrypoint: str = "/pause") -> bytes:
    """A docker-archive tar of one layer holding ``binary`` at ``entrypoint`` (what ``docker save`` writes)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname=entrypoint.lstrip("/"))
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with binary.open("rb") as fh:
            tar.addfile(info, fh)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": [entrypoint], "StopSignal": "SIGTERM"},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in ((config_name, config), ("layer/layer.tar", layer_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


DOCKER_ID_LABEL = "eppkit.docker-id"  # on an image imported from docker: the id it had there


def present(socket: Path, name: str, label: str | None = None) -> bool:
    """containerd holds the image ``name`` (as normalized: ``docker.io/...`` for a short name), with ``label``
    (``key=value``) when given."""
    wanted = f"name=={name}"
    if label is not None:
        key, value = label.split("=", 1)
        wanted += f',labels."{key}"=={value}'
    out = subprocess.run([*ctr(socket), "images", "ls", "-q", wanted], capture_output=True, text=True, timeout=60)
    return bool(out.stdout.strip())


def import_tar(socket: Path, data: bytes) -> None:
    """Import a docker-archive tar; RuntimeError with ctr's words when it refuses it."""
    out = subprocess.run([*ctr(socket), "images", "import", "-"], input=data, capture_output=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"ctr images import failed: {out.stderr.decode(errors='replace')[-800:]}")


def ensure_pause(socket: Path, binary: Path) -> str:
    """The pause image, imported once per binary; its name (containerd's ``sandbox_image``)."""
    tag = pause_tag(binary)
    if not present(socket, tag):
        import_tar(socket, docker_archive(binary, tag))
    return tag


def ensure_from_docker(socket: Path, tag: str, lock: Path) -> None:
    """The Docker image ``tag`` in the node's containerd, imported once (``docker save | ctr images import``, about
    10-20 s for the kit's services image); RuntimeError with the tools' words when either refuses."""
    from eppkit.core.paths import cache_lock

    first = tag.split("/")[0]
    if "/" in tag and ("." in first or ":" in first or first == "localhost"):
        name = tag  # a registry named: as it is
    else:  # docker's short names, as containerd stores them
        name = f"docker.io/{tag}" if "/" in tag else f"docker.io/library/{tag}"
    # The docker image's id, kept as a label on the node's copy: a tag rebuilt since (an EPP image of yours, whose
    # tag says nothing of its content) is imported again, never run stale.
    inspected = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True,
                               text=True, timeout=60)
    label = f"{DOCKER_ID_LABEL}={inspected.stdout.strip().removeprefix('sha256:')[:40]}"
    if present(socket, name, label):
        return
    with cache_lock(lock):
        if present(socket, name, label):
            return
        saved = subprocess.run(["docker", "save", tag], capture_output=True, timeout=600)
        if saved.returncode != 0:
            raise RuntimeError(f"docker save {tag} failed: {saved.stderr.decode(errors='replace')[-800:]}")
        import_tar(socket, saved.stdout)
        subprocess.run([*ctr(socket), "images", "label", name, label], capture_output=True, timeout=60)
