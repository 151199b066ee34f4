"""What a testbed builds on its first use, listed once: GAIE's EPP, the Kubernetes control plane and the container
images of the docker and kubernetes runtimes (minutes each when cold). ``eppkit bootstrap --all`` builds them all now; the pytest plugin builds those its collected tests need
before the first test starts (:mod:`eppkit.pytest_plugin.prepare`), so that no test's timeout pays for a build. A
testbed still builds what is missing when it starts (``eppkit up``, a test that said nothing of its needs).

Here, not in :mod:`eppkit.builds`: the control plane's part is its binaries and its snapshot, which
:mod:`eppkit.components.controlplane` makes, and what a topology needs is read from its mode.
Each build takes its cache's lock, so sessions or processes that build at once build once; the others wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eppkit.builds import controlplane, gaie
from eppkit.components import controlplane as plane
from eppkit.core.progress import Progress

if TYPE_CHECKING:
    from eppkit.topology import Topology

GAIE_EPP, CONTROL_PLANE, IMAGES = "gaie-epp", "control-plane", "images"


@dataclass(frozen=True)
class FirstUse:
    name: str  # what the plugin's eppkit_prepare marker calls it
    label: str  # what a person reads
    cold: str  # how long a cold build takes
    built: Callable[[], bool]
    build: Callable[[Progress], str]  # builds what is missing, or reuses it: a line saying what there is; its error
    # says why not and how to get it (no Go: install it)
    wanted: Callable[[Topology], bool]  # does a testbed of this topology run it
    runtime_only: bool = False  # what a runtime runs (it says so: Capabilities.builds), whatever the topology


def watches_pool(topology: Topology) -> bool:
    """Its EPP watches an InferencePool (False for a bad mode or option: the testbed says so when it is made)."""
    from eppkit import modes

    try:
        mode = modes.get(topology.mode)
        return mode.watches_pool(mode.read_options(topology.options))
    except ValueError:
        return False


def _gaie_build(progress: Progress) -> str:
    binary = gaie.build(progress)
    return f"{gaie.version_line(binary)} at {binary}"


def _plane_built() -> bool:
    found = controlplane.find()
    return found is not None and (plane.snapshot_dir(found) / plane.ETCD_DATA).is_dir()


def _plane_build(progress: Progress) -> str:
    binaries = controlplane.build(progress)
    return (f"{controlplane.versions(binaries)} ({binaries.source}: {binaries.etcd.parent}); "
            f"snapshot {plane.snapshot(binaries, progress).parent}")


def _images_built() -> bool:
    from eppkit.runtimes import images

    try:
        return all(choice.present for choice in images.plan())
    except Exception:  # noqa: BLE001  (no engine answers: the build says so in its own words)
        return False


def _images_build(progress: Progress) -> str:
    from eppkit.runtimes import images

    made = images.ensure(progress)
    return f"{made.envoy}, {made.jaeger}, {made.services} ({made.source})"


BUILDS: dict[str, FirstUse] = {b.name: b for b in (
    FirstUse(GAIE_EPP, "GAIE's EPP", "4-8 min cold on 2 cores", lambda: gaie.find() is not None, _gaie_build,
             lambda topology: topology.mode == GAIE_EPP),  # the mode of that name
    FirstUse(CONTROL_PLANE, "the control plane (etcd, kube-apiserver)", "3-12 min cold on 2 cores", _plane_built,
             _plane_build, watches_pool),
    FirstUse(IMAGES, "the container images (Envoy, Jaeger, the kit's services)", "3-5 min cold on 2 cores",
             _images_built, _images_build, lambda topology: False, runtime_only=True),
)}


def needs(topology: Topology, runtime: str | None = None) -> list[str]:
    """The first-use builds a testbed of ``topology`` runs (on ``runtime``: what every testbed there runs, too)."""
    wanted = runtime_needs(runtime) if runtime else []
    return [b.name for b in BUILDS.values() if b.wanted(topology) or b.name in wanted]


def runtime_needs(runtime: str) -> list[str]:
    """The first-use builds every testbed of ``runtime`` runs, as it says (a container runtime's images)."""
    from eppkit.runtimes import registry

    wanted = registry.get(runtime).capabilities.builds
    return [b.name for b in BUILDS.values() if b.name in wanted]
