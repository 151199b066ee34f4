"""The docker engine and the registry as the image recipes use them: probe, pull, build, prune, lock; tags made
from a hash of an image's inputs."""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from eppkit.core.paths import DOCKERFILES, cache_dir, cache_lock
from eppkit.core.progress import Progress
from eppkit.core.settings import Settings, settings
from eppkit.gateway import process as envoy_process

SOURCE_ENV = Settings.variable("image_source")  # auto (default) | registry | offline
REPO_ENV = Settings.variable("image_repo")  # namespace of the images we build (default: eppkit)
RECIPE_VERSION = "2"  # bump to rebuild every image after a change in how they are made
# The official Envoy image: the envoy image's first choice, and what the registry probe asks the manifest of.
ENVOY_OFFICIAL = f"envoyproxy/envoy:v{envoy_process.ENVOY_VERSION}"


class ImageError(RuntimeError):
    pass


@dataclass
class ImageChoice:
    """One image the docker runtime needs: its tag, where it comes from and whether it is here."""

    component: str  # envoy | jaeger | python-base | services-deps | services
    tag: str
    origin: str  # "official" (pulled or already present) | "built" (from local artifacts)
    recipe: str  # one line saying how it is made
    present: bool = False
    inputs: dict = field(default_factory=dict, repr=False)  # what the builder needs


def engine_client(timeout: float = 600):
    import docker

    return docker.from_env(timeout=timeout)


_registry_memo: dict[str, bool] = {}


def registry_reachable(timeout_s: float = 4.0) -> bool:
    """Can the engine reach the registry? Asks the engine for the Envoy image's manifest.

    Only the engine talks, and only to the registry (the same request a pull starts with);
    nothing is downloaded. The answer is remembered for the life of the process.
    """
    if "answer" in _registry_memo:
        return _registry_memo["answer"]
    try:
        import docker

        api = docker.APIClient(timeout=timeout_s)
        try:
            api.inspect_distribution(ENVOY_OFFICIAL)
            answer = True
        finally:
            api.close()
    except Exception:
        answer = False
    _registry_memo["answer"] = answer
    return answer


def choose_source() -> str:
    wanted = settings().image_source  # auto, registry or offline (a value that is none is refused as it is read)
    if wanted in ("registry", "offline"):
        return wanted
    return "registry" if registry_reachable() else "offline"


def present(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def sha(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode() if not isinstance(part, bytes) else part)
        h.update(b"\0")
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file, remembered on disk by (path, size, mtime) so big binaries hash once."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}:{st.st_size}:{st.st_mtime_ns}"
    memo_path = cache_dir() / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    memo = {k: v for k, v in memo.items() if not k.startswith(f"{path}:")}
    memo[key] = h.hexdigest()
    tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo))
    tmp.replace(memo_path)
    return memo[key]


def tree_digest(files: dict[str, Path]) -> str:
    """One digest of ``{name: file}``: names and contents."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return h.hexdigest()


def repo() -> str:
    """Namespace of built images: ``eppkit`` unless $EPPKIT_IMAGE_REPO says otherwise (e.g. per CI job)."""
    return settings().image_repo


def tag(repo: str, version: str, digest: str) -> str:
    return f"{repo}:{version}-{digest[:12]}"


def dockerfile(name: str) -> str:
    return (DOCKERFILES / name).read_text()


@contextmanager
def context(name: str) -> Iterator[Path]:
    root = cache_dir() / "build"
    root.mkdir(parents=True, exist_ok=True)
    ctx = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    try:
        yield ctx
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


def place(src: Path, dest: Path, link: bool = True) -> None:
    """Put ``src``'s content (symlinks followed) at ``dest``: a hard link when possible, else a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    real = Path(os.path.realpath(src))
    if link:
        try:
            os.link(real, dest)
            return
        except OSError:
            pass
    shutil.copy2(real, dest)


def stream(argv: list[str], progress: Progress, label: str, every_s: float = 5.0,
            keep: tuple[str, ...] = ()) -> None:
    """Run a command, reporting a line every ``every_s`` seconds (or each line starting with ``keep``)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    last = 0.0
    count = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-40:]
        now = time.monotonic()
        if keep and line.startswith(keep):
            count += 1
        if now - last >= every_s:
            last = now
            shown = f"{count} so far, last: {line}" if keep else line
            progress(f"{label}: {shown[:140]} ({now - started:.0f}s)")
    if proc.wait() != 0:
        raise ImageError(f"{label}: `{' '.join(argv[:4])} ...` failed (exit {proc.returncode}):\n" + "\n".join(tail))


def build(choice: ImageChoice, ctx: Path, dockerfile: str, buildargs: dict[str, str], progress: Progress) -> None:
    """docker build with no network (every input is in the context), streaming its steps."""
    import docker

    shutil.copy(DOCKERFILES / dockerfile, ctx / "Dockerfile")
    repo, tag = choice.tag.rsplit(":", 1)
    api = docker.APIClient(timeout=1800)
    started = time.monotonic()
    tail: list[str] = []
    try:
        for event in api.build(path=str(ctx), tag=choice.tag, rm=True, forcerm=True, network_mode="none",
                               buildargs=buildargs, decode=True, labels={"eppkit": "1"}):
            if "error" in event:
                raise ImageError(f"building {choice.tag} failed: {event['error'].strip()}\n" + "\n".join(tail[-30:]))
            text = event.get("stream", "").rstrip()
            if not text:
                continue
            tail.append(text)
            if text.startswith("Step "):
                progress(f"{choice.component}: {text[:150]} ({time.monotonic() - started:.0f}s)")
    finally:
        api.close()


def pull(ref: str, progress: Progress) -> None:
    import docker

    repo, tag = ref.rsplit(":", 1)
    api = docker.APIClient(timeout=1800)
    layers: dict[str, str] = {}
    last = 0.0
    try:
        for event in api.pull(repo, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise ImageError(f"pulling {ref} failed: {event['error']}")
            if event.get("id") and event.get("status"):
                layers[event["id"]] = event["status"]
            now = time.monotonic()
            if now - last >= 3:
                last = now
                done = sum(1 for s in layers.values() if s in ("Pull complete", "Already exists"))
                progress(f"pulling {ref}: {done}/{len(layers)} layers")
    finally:
        api.close()


def prune(client, repo: str, keep_tag: str, keep: int = 3, min_age_s: float = 3600) -> None:
    """Remove older tags of one of our repos.

    The newest ``keep`` stay, and so does anything younger than ``min_age_s`` or used by a
    container: other sessions on this engine may be running an older checkout's image.
    """
    try:
        images = client.images.list(name=repo)
    except Exception:
        return
    tagged = sorted(images, key=lambda im: im.attrs.get("Created", ""), reverse=True)
    now = time.time()
    for image in tagged[keep:]:
        created = image.attrs.get("Created", "")
        try:
            age = now - calendar.timegm(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S"))  # Created is UTC
        except ValueError:
            continue
        if age < min_age_s:
            continue
        for tag in image.tags:
            if tag != keep_tag and tag.startswith(repo + ":"):
                try:
                    client.images.remove(tag, noprune=False)
                except Exception:  # used by a container, or removed by a concurrent session
                    pass


def lock():
    """One builder at a time on this machine (several sessions may start together)."""
    return cache_lock(cache_dir() / "images.lock")
