"""Build what the one-node Kubernetes cluster adds to the control plane: kubelet, kube-controller-manager,
kube-scheduler and a pause binary, once, into the kit's cache (``eppkit bootstrap --kubernetes``).

They come from ``k8s.io/kubernetes`` at the control plane's version through the same wrapper module as
kube-apiserver (its 31 staging modules pinned to the published ``v0.x.y``), ``CGO_ENABLED=0`` and the same
ldflags, so the kubelet reports the apiserver's version and the skew is 0. One ``go build`` a binary keeps the
peak memory at one link (~1.9 GB). The pause binary is the kit's own (``eppkit/cluster/pause``, static): no
registry serves the upstream image here. With Go's cache warm from the kube-apiserver build the three take about
3.5 minutes on 2 cores; fully cold about 6.

    python -m eppkit.builds.kubenode          # build (or reuse) and print the folder
    python -m eppkit.builds.kubenode --find   # print the folder only if already built
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eppkit.builds import controlplane as plane
from eppkit.builds.steps import build_folder, build_main, go_for_build, go_version, run_step
from eppkit.core.paths import cache_dir, cache_lock

KUBELET, CONTROLLER_MANAGER, SCHEDULER, PAUSE = "kubelet", "kube-controller-manager", "kube-scheduler", "pause"
COMPONENTS = (KUBELET, CONTROLLER_MANAGER, SCHEDULER)
PAUSE_SOURCE = Path(__file__).resolve().parent.parent / "cluster" / "pause"


class NodeBuildError(RuntimeError):
    """The node's binaries could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class NodeBinaries:
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def kubelet(self) -> Path:
        return self.path(KUBELET)


def build_dir() -> Path:
    return cache_dir() / "controlplane" / f"kube-{plane.KUBE_VERSION}-node"


def find() -> NodeBinaries | None:
    """The built binaries, or None when any is missing (nothing is built)."""
    folder = build_dir()
    return NodeBinaries(folder) if all((folder / n).is_file() for n in (*COMPONENTS, PAUSE)) else None


def missing_message() -> str:
    return (f"the one-node cluster's binaries (kubelet, kube-controller-manager, kube-scheduler {plane.KUBE_VERSION}) "
            "are not built.\nHint: run `eppkit bootstrap --kubernetes` (needs Go; minutes the first time).")


def build(progress: Callable[[str], object] = print, *, force: bool = False) -> NodeBinaries:
    """The binaries, building what is missing (locked: a second session waits and reuses)."""
    if not force and (found := find()) is not None:
        return found
    go, env = go_for_build(NodeBuildError, missing_message(), CGO_ENABLED="0")
    root = build_dir().parent
    root.mkdir(parents=True, exist_ok=True)
    with cache_lock(root / "build.lock"):
        if force or find() is None:
            _build(go, env, progress)
    found = find()
    assert found is not None
    return found


def _build(go: str, env: dict[str, str], progress: Callable[[str], object]) -> None:
    out = build_dir()
    started = time.monotonic()
    hint = "the Go module proxy must serve Kubernetes at the pinned version (GOPROXY, network)"
    ldflags = plane.kube_ldflags_for(plane.KUBE_VERSION)
    with build_folder(out, out.parent / "node-build.failed.log") as (tmp, log, info):
        wrapper = tmp / "kube-wrapper"
        wrapper.mkdir()
        kube_src = plane.module_dir(go, env, plane.KUBE_MODULE, plane.KUBE_VERSION)
        (wrapper / "go.mod").write_text(plane.kube_wrapper_gomod((kube_src / "go.mod").read_text()))
        packages = [f"{plane.KUBE_MODULE}/cmd/{name}" for name in COMPONENTS]
        steps = [(wrapper, f"fetching {', '.join(COMPONENTS)} {plane.KUBE_VERSION} and their dependencies",
                  [go, "get", *(f"{p}@{plane.KUBE_VERSION}" for p in packages)])]
        steps += [(wrapper, f"compiling {name} {plane.KUBE_VERSION} (warm: 10 s - 2 min; cold: minutes, ~1.9 GB)",
                   [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(tmp / name), package])
                  for name, package in zip(COMPONENTS, packages)]
        steps.append((PAUSE_SOURCE, "compiling the pause binary",
                      [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp / PAUSE), "."]))
        for folder, what, cmd in steps:
            run_step(progress, log, what, cmd, folder, env, label="kubernetes node", hint=hint,
                     error=NodeBuildError, timeout_s=plane.STEP_TIMEOUT_S)
        info.update({"kubernetes": f"{plane.KUBE_MODULE}@{plane.KUBE_VERSION}", "binaries": [*COMPONENTS, PAUSE],
                     "go": go_version(go, env)})
    progress(f"kubernetes node: built {', '.join(COMPONENTS)} and pause in {time.monotonic() - started:.1f} s ({out})")


def main(argv: list[str] | None = None) -> int:
    def found() -> Path | None:
        binaries = find()
        return binaries.folder if binaries else None

    return build_main(argv, "python -m eppkit.builds.kubenode", __doc__, found,
                      lambda progress, **kw: build(progress, **kw).folder, NodeBuildError)


if __name__ == "__main__":
    sys.exit(main())
