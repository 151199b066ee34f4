"""Build the Kubernetes control plane the kit runs on loopback (etcd and kube-apiserver), once, into its cache,
and take GAIE's CRDs from the GAIE module.

EPPs that are Kubernetes controllers (GAIE's EPP, a team's own) watch an InferencePool and its Pods. The kit
gives them a real kube-apiserver and etcd, as controller-runtime's envtest does
(:mod:`eppkit.components.controlplane` starts them). ``eppkit bootstrap --all`` builds both here, or the first
testbed that needs them does, with progress:

- etcd ``go.etcd.io/etcd/server/v3@v3.6.16``. A wrapper module ``go get``s the module: etcd's own go.mod
  has ``replace ../api`` lines, which fail inside the module cache. etcd v3.6.16 needs Go >= 1.26.
- kube-apiserver ``k8s.io/kubernetes/cmd/kube-apiserver@v1.35.4``. k8s.io/kubernetes replaces its 31 staging
  modules with ``./staging/...``; a dependency's replace lines are ignored, so the wrapper pins each of them
  to the published ``v0.35.4``. Its version is set with the same ldflags as Kubernetes' own build.
- GAIE's CRDs (``config/crd/bases/*.yaml``) from ``sigs.k8s.io/gateway-api-inference-extension@v1.5.0``.

A cold build takes 3 to 12 minutes on 2 cores (the kube-apiserver link step peaks at ~1.8 GB); with warm Go
caches both take ~15 s, bit-identical. ``EPPKIT_KUBE_ASSETS`` names a folder that already holds ``etcd`` and
``kube-apiserver`` (the layout of envtest's ``KUBEBUILDER_ASSETS``, e.g. ``setup-envtest use -p path``):
then nothing is built but the CRDs.

    python -m eppkit.builds.controlplane          # build (or reuse) and print the folder
    python -m eppkit.builds.controlplane --find   # print the folder only if already built
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eppkit.builds import gaie
from eppkit.builds.steps import build_folder, build_main, go_for_build, go_version, run_step
from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.settings import Settings, settings

ETCD_MODULE, ETCD_VERSION = "go.etcd.io/etcd/server/v3", "v3.6.16"
KUBE_MODULE, KUBE_VERSION = "k8s.io/kubernetes", "v1.35.4"
KUBE_PACKAGE = f"{KUBE_MODULE}/cmd/kube-apiserver"
GO_NEEDED = (1, 26)  # etcd v3.6.16's go.mod says go 1.26.0 (v3.6.12 was the last on 1.25)
ASSETS_ENV = Settings.variable("kube_assets")
CRD_DIR = "config/crd/bases"
ETCD, KUBE_APISERVER = "etcd", "kube-apiserver"
STEP_TIMEOUT_S = 1800.0  # a cold kube-apiserver link on a busy 2-core machine took 12 min


class ControlPlaneBuildError(RuntimeError):
    """etcd, kube-apiserver or the CRDs could not be had; the message says why and what to do."""


@dataclass(frozen=True)
class ControlPlaneBinaries:
    etcd: Path
    kube_apiserver: Path
    crds: Path  # a folder of CRD manifests (GAIE's)
    source: str  # "built" (the cache) or the EPPKIT_KUBE_ASSETS folder

    def crd_files(self) -> list[Path]:
        return sorted(self.crds.glob("*.yaml"))


def build_dir() -> Path:
    return cache_dir() / "controlplane" / f"kube-{KUBE_VERSION}-etcd-{ETCD_VERSION}"


def crd_dir() -> Path:
    return cache_dir() / "controlplane" / f"crds-gaie-{gaie.VERSION}"


def missing_message() -> str:
    return (f"the Kubernetes control plane (etcd {ETCD_VERSION}, kube-apiserver {KUBE_VERSION}) is not built.\n"
            f"Hint: it is built on first use, or run `eppkit bootstrap --all` (needs Go >= "
            f"{'.'.join(map(str, GO_NEEDED))}; a cold build takes minutes), "
            f"or set {ASSETS_ENV} to a folder holding etcd and kube-apiserver (envtest's KUBEBUILDER_ASSETS).")


def _assets() -> tuple[Path, Path, str] | None:
    """etcd and kube-apiserver of EPPKIT_KUBE_ASSETS, or the cache's; None when either is missing."""
    folder = settings().kube_assets
    base, source = (folder, str(folder)) if folder else (build_dir(), "built")
    etcd, apiserver = base / ETCD, base / KUBE_APISERVER
    return (etcd, apiserver, source) if etcd.is_file() and apiserver.is_file() else None


def find() -> ControlPlaneBinaries | None:
    """The binaries and the CRDs, or None when something is missing (nothing is built)."""
    found = _assets()
    if found is None or not any(crd_dir().glob("*.yaml")):
        return None
    return ControlPlaneBinaries(found[0], found[1], crd_dir(), found[2])


def build(progress: Callable[[str], object] = print, *, force: bool = False) -> ControlPlaneBinaries:
    """The binaries and the CRDs, building what is missing (locked: a second session waits and reuses)."""
    if not force:
        found = find()
        if found is not None:
            return found
    folder = settings().kube_assets
    if folder and _assets() is None:
        raise ControlPlaneBuildError(f"{ASSETS_ENV}={folder} holds no etcd and kube-apiserver.\n"
                                     f"Hint: point it at a folder with both (`setup-envtest use -p path`), or unset it "
                                     "and run `eppkit bootstrap --all` to build them.")
    go, env = go_for_build(ControlPlaneBuildError, missing_message(), CGO_ENABLED="0")
    root = build_dir().parent
    root.mkdir(parents=True, exist_ok=True)
    with cache_lock(root / "build.lock"):
        if force or not any(crd_dir().glob("*.yaml")):
            _fetch_crds(go, env, progress)
        if not folder and (force or _assets() is None):
            _check_go(go, env)
            _build_binaries(go, env, progress)
    found = find()
    assert found is not None
    return found


def _check_go(go: str, env: dict[str, str]) -> None:
    version = go_version(go, env)
    match = re.match(r"go(\d+)\.(\d+)", version)
    if match and tuple(map(int, match.groups())) < GO_NEEDED:
        raise ControlPlaneBuildError(
            f"etcd {ETCD_VERSION} needs Go >= {'.'.join(map(str, GO_NEEDED))}; `go` is {version}.\n"
            f"Hint: install a newer Go (https://go.dev/dl/), or set {ASSETS_ENV} to a folder holding etcd and "
            "kube-apiserver (envtest's KUBEBUILDER_ASSETS).")


def module_dir(go: str, env: dict[str, str], module: str, version: str) -> Path:
    """Where the Go module cache holds ``module@version`` (downloaded if need be)."""
    proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True,
                          env=env, timeout=STEP_TIMEOUT_S)
    try:
        return Path(json.loads(proc.stdout)["Dir"])
    except (ValueError, KeyError):
        raise ControlPlaneBuildError(
            f"`go mod download {module}@{version}` failed:\n{(proc.stdout + proc.stderr)[-1500:]}\n"
            "Hint: the Go module proxy must serve it (GOPROXY, network).") from None


def _fetch_crds(go: str, env: dict[str, str], progress: Callable[[str], object]) -> None:
    progress(f"control plane: GAIE's CRDs from {gaie.MODULE}@{gaie.VERSION} ...")
    source = module_dir(go, env, gaie.MODULE, gaie.VERSION) / CRD_DIR
    files = sorted(source.glob("*.yaml"))
    if not files:
        raise ControlPlaneBuildError(f"{gaie.MODULE}@{gaie.VERSION} has no CRDs in {CRD_DIR}")
    tmp = Path(tempfile.mkdtemp(prefix="crds.", dir=crd_dir().parent))
    for f in files:
        shutil.copyfile(f, tmp / f.name)
    shutil.rmtree(crd_dir(), ignore_errors=True)
    tmp.rename(crd_dir())


def kube_wrapper_gomod(kubernetes_gomod: str) -> str:
    """The wrapper's go.mod: k8s.io/kubernetes, each of its staging modules pinned to the published v0.x.y."""
    staging = "v0" + KUBE_VERSION[2:]  # v1.35.4 -> v0.35.4
    block = re.search(r"^replace \($(.*?)^\)", kubernetes_gomod, re.S | re.M)
    if block is None:
        raise ControlPlaneBuildError(f"{KUBE_MODULE}@{KUBE_VERSION}'s go.mod has no replace block")
    modules = [line.split()[0] for line in block.group(1).splitlines() if "=>" in line]
    lines = "".join(f"\t{m} => {m} {staging}\n" for m in modules)
    return f"module eppkit-kube-apiserver-wrapper\n\ngo 1.25.0\n\nrequire {KUBE_MODULE} {KUBE_VERSION}\n\nreplace (\n{lines})\n"


def kube_ldflags_for(version: str) -> str:
    """The ldflags Kubernetes' own build sets, so a binary reports ``version`` (the kubelet in its Node too)."""
    pkg = "k8s.io/component-base/version"
    return (f"-s -w -X {pkg}.gitVersion={version} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={version.split('.')[1]} "
            f"-X {pkg}.gitTreeState=clean -X {pkg}.buildDate=1970-01-01T00:00:00Z")


def _build_binaries(go: str, env: dict[str, str], progress: Callable[[str], object]) -> None:
    out = build_dir()
    started = time.monotonic()
    hint = "the Go module proxy must serve etcd and Kubernetes at the pinned versions (GOPROXY, network)"
    kube_ldflags = kube_ldflags_for(KUBE_VERSION)
    with build_folder(out, out.parent / "build.failed.log") as (tmp, log, info):
        (tmp / "etcd-wrapper").mkdir()
        (tmp / "kube-wrapper").mkdir()
        kube_src = module_dir(go, env, KUBE_MODULE, KUBE_VERSION)
        (tmp / "kube-wrapper" / "go.mod").write_text(kube_wrapper_gomod((kube_src / "go.mod").read_text()))
        steps = [
            ("etcd-wrapper", "creating etcd's wrapper module", [go, "mod", "init", "eppkit-etcd-wrapper"]),
            ("etcd-wrapper", f"fetching {ETCD_MODULE}@{ETCD_VERSION}", [go, "get", f"{ETCD_MODULE}@{ETCD_VERSION}"]),
            ("etcd-wrapper", f"compiling etcd {ETCD_VERSION} (cold: 1-3 min; warm: seconds)",
             [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp / ETCD), ETCD_MODULE]),
            ("kube-wrapper", f"fetching {KUBE_PACKAGE}@{KUBE_VERSION} and its dependencies",
             [go, "get", f"{KUBE_PACKAGE}@{KUBE_VERSION}"]),
            ("kube-wrapper", f"compiling kube-apiserver {KUBE_VERSION} (cold: 3-12 min on 2 cores, ~1.8 GB; "
             "warm: ~15 s)", [go, "build", "-trimpath", f"-ldflags={kube_ldflags}", "-o", str(tmp / KUBE_APISERVER),
                              KUBE_PACKAGE]),
        ]
        for folder, what, cmd in steps:
            run_step(progress, log, what, cmd, tmp / folder, env, label="control plane", hint=hint,
                  error=ControlPlaneBuildError, timeout_s=STEP_TIMEOUT_S)
        info.update({"etcd": f"{ETCD_MODULE}@{ETCD_VERSION}", "kube-apiserver": f"{KUBE_PACKAGE}@{KUBE_VERSION}",
                     "go": go_version(go, env)})
    progress(f"control plane: built etcd and kube-apiserver in {time.monotonic() - started:.1f} s ({out})")


def versions(binaries: ControlPlaneBinaries) -> str:
    """What ``--version`` of each says, in one line (what eppkit doctor prints)."""
    def first_line(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unusable ({exc})"
        return out.strip().splitlines()[0] if out.strip() else "?"

    etcd = first_line([str(binaries.etcd), "--version"]).replace("etcd Version: ", "etcd ")
    return f"{etcd}, {first_line([str(binaries.kube_apiserver), '--version'])}"


def main(argv: list[str] | None = None) -> int:
    def folder(progress: Callable[[str], object], **kwargs) -> Path:
        return build(progress, **kwargs).etcd.parent

    def found() -> Path | None:
        binaries = find()
        return binaries.etcd.parent if binaries else None

    return build_main(argv, "python -m eppkit.builds.controlplane", __doc__, found, folder, ControlPlaneBuildError)


if __name__ == "__main__":
    sys.exit(main())
