"""inference-perf, kubernetes-sigs' LLM load tool, in its own virtualenv in the kit's cache, with a tokenizer made
here that counts as the kit's mock vLLM does; ``eppkit compare --load-tool inference-perf`` drives it.

inference-perf 0.7.0 needs Python >= 3.12 (the kit runs on 3.11). The interpreter is, in this order:
``$EPPKIT_LOAD_TOOL_PYTHON``; ``python3.12``, ``python3.13``, ... on PATH; pyenv's versions
(``$PYENV_ROOT/versions/3.1x*``); the kit's own interpreter when it is new enough. Each candidate is run
once to ask its version (a pyenv shim of a version not selected fails, and is passed over).

``eppkit bootstrap --load-tool inference-perf`` (or ``python -m eppkit.builds.inference_perf``) makes, once,
under a lock, in ``<cache>/inference-perf/0.7.0/``:

- ``venv/``: that interpreter's virtualenv with ``inference-perf==0.7.0`` installed under the pinned set it
  was measured with (``inference_perf_constraints.txt``; cold: about 2 minutes, 190 MB of wheels, 800 MB);
- ``tokenizer/``: a word-level tokenizer from the mock's rule and words (``word_tokenizer.py``, run by the
  venv's interpreter), then checked against the mock's own count on sample texts;
- ``install.json``: what was built, with a digest of the mock's rule and words; when those change, the
  tokenizer is made again.

Afterwards everything is found offline: the tool runs with ``HF_HUB_OFFLINE=1`` and a local tokenizer.

    python -m eppkit.builds.inference_perf          # build (or reuse) and print the venv's folder
    python -m eppkit.builds.inference_perf --find   # print it only if already built
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eppkit.builds.steps import build_main, run_step
from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.settings import Settings, settings
from eppkit.services.openai_server import tokens

NAME = "inference-perf"
VERSION = "0.7.0"
MIN_PYTHON = (3, 12)
PYTHON_ENV = Settings.variable("load_tool_python")
CONSTRAINTS = Path(__file__).with_name("inference_perf_constraints.txt")
TOKENIZER_SCRIPT = Path(__file__).with_name("word_tokenizer.py")
# Where the tool may look for models and data sets: nowhere but local folders.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
PROBE_TIMEOUT_S = 20.0


class LoadToolBuildError(RuntimeError):
    """The load tool could not be installed; the message says why and what to do."""


@dataclass(frozen=True)
class LoadTool:
    """An installed inference-perf: its command, its interpreter and its tokenizer folder."""

    root: Path
    python_version: str

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def command(self) -> Path:
        return self.venv / "bin" / NAME

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    def env(self, hf_home: Path) -> dict[str, str]:
        """The environment the tool runs in: offline, its Hugging Face caches under ``hf_home``."""
        return {**os.environ, **OFFLINE_ENV, "HF_HOME": str(hf_home), "TOKENIZERS_PARALLELISM": "false"}


def install_dir() -> Path:
    return cache_dir() / NAME / VERSION


def tokenizer_spec() -> dict:
    """What the tokenizer is made from: the mock's rule and the words it answers with (any other word counts
    one as well, as ``[UNK]``: the vocabulary only matters for decoding)."""
    return {"pattern": tokens.TOKEN_RE.pattern, "words": sorted(set(tokens.OUTPUT_WORDS))}


def _digest(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def find() -> LoadTool | None:
    """The installed tool with a tokenizer of today's rule, or None (``eppkit bootstrap --load-tool ...``)."""
    root = install_dir()
    try:
        info = json.loads((root / "install.json").read_text())
    except (OSError, ValueError):
        return None
    tool = LoadTool(root, info.get("python", "?"))
    if info.get("tokenizer_digest") != _digest(tokenizer_spec()):
        return None
    if not (tool.command.is_file() and (tool.tokenizer / "tokenizer.json").is_file()):
        return None
    return tool


# -- a Python >= 3.12 --------------------------------------------------------------------------------------

def _version_of(python: str) -> tuple[tuple[int, int], str] | None:
    """(major, minor) and the real executable of ``python``, or None when it does not run."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1], sys.executable)"],
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.stdout.split(maxsplit=2)
    if out.returncode != 0 or len(parts) != 3:
        return None
    return (int(parts[0]), int(parts[1])), parts[2].strip()


def _candidates() -> list[str]:
    given = settings().load_tool_python
    if given:
        return [given]  # the user's choice, and only it: a wrong one is an error, not a fallback
    names = [f"python3.{minor}" for minor in range(MIN_PYTHON[1], 20)]
    on_path = [p for p in (shutil.which(n) for n in names) if p]
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    pyenvs = sorted(glob.glob(os.path.join(pyenv, "versions", "3.1[2-9]*", "bin", "python3")))
    return [*on_path, *pyenvs, sys.executable]


def find_python() -> tuple[str | None, str]:
    """An interpreter >= 3.12 (its path, its version) or (None, what was tried and how to get one)."""
    tried = []
    for candidate in dict.fromkeys(_candidates()):
        found = _version_of(candidate)
        if found is not None and found[0] >= MIN_PYTHON:
            return found[1], f"{found[0][0]}.{found[0][1]}"
        tried.append(f"{candidate} ({'does not run' if found is None else '%d.%d' % found[0]})")
    want = ".".join(map(str, MIN_PYTHON))
    if settings().load_tool_python:
        return None, f"${PYTHON_ENV}={settings().load_tool_python} is not a Python >= {want}: {', '.join(tried)}"
    return None, (f"{NAME} {VERSION} needs Python >= {want}; none found (tried {', '.join(tried) or 'nothing'}). "
                  f"Install one (`pyenv install 3.12`, or apt's python3.12 and python3.12-venv where the distribution "
                  f"has them) or point ${PYTHON_ENV} at one, then run `eppkit bootstrap --load-tool {NAME}`")


def missing() -> str:
    """Why the tool cannot be used now, and the command that fixes it."""
    python, said = find_python()
    if python is None:
        return said
    return (f"{NAME} {VERSION} is not installed in the kit's cache ({install_dir()}): run "
            f"`eppkit bootstrap --load-tool {NAME}` (once, about 2 minutes with Python {said}; offline afterwards)")


# -- the build -----------------------------------------------------------------------------------------------

def build(progress: Callable[[str], object] = print, *, force: bool = False) -> LoadTool:
    """Install the tool (or reuse the install) and return it; the tokenizer is remade when the mock's rule changed."""
    tool = find()
    if tool is not None and not force:
        return tool
    root = install_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(root.parent / f"{VERSION}.lock"):
        tool = find()
        if tool is not None and not force:  # built by someone else while we waited
            return tool
        return _build_locked(root, progress, force=force)


def _build_locked(root: Path, progress: Callable[[str], object], *, force: bool) -> LoadTool:
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    (root / "install.json").unlink(missing_ok=True)
    log_path = root / "build.log"
    venv = root / "venv"
    with log_path.open("w") as log:
        if force or not (venv / "bin" / NAME).is_file():
            python, version = find_python()
            if python is None:
                raise LoadToolBuildError(version)
            shutil.rmtree(venv, ignore_errors=True)
            hint = f"pip must reach PyPI (or a mirror: PIP_INDEX_URL) for {NAME}=={VERSION} and its dependencies"
            env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            run_step(progress, log, f"a virtualenv with Python {version} ({python})", [python, "-m", "venv", str(venv)],
                  root, env, label=NAME, hint=hint, error=LoadToolBuildError)
            run_step(progress, log, f"pip install {NAME}=={VERSION} (cold: about 2 min, 190 MB)",
                  [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{NAME}=={VERSION}",
                   "-c", str(CONSTRAINTS)], root, env, label=NAME, hint=hint, error=LoadToolBuildError)
        tool = LoadTool(root, _venv_version(venv))
        spec = tokenizer_spec()
        _run_tokenizer(tool, ["make", str(tool.tokenizer)], spec, log)
        check_tokenizer(tool)
    (root / "install.json").write_text(json.dumps({
        "tool": NAME, "version": VERSION, "python": tool.python_version, "tokenizer_digest": _digest(spec),
        "seconds": round(time.monotonic() - started, 1)}, indent=2) + "\n")
    progress(f"{NAME}: {VERSION} in {venv} (Python {tool.python_version}), tokenizer {tool.tokenizer}, "
             f"{time.monotonic() - started:.1f} s")
    return tool


def _venv_version(venv: Path) -> str:
    found = _version_of(str(venv / "bin" / "python"))
    return "?" if found is None else f"{found[0][0]}.{found[0][1]}"


def _run_tokenizer(tool: LoadTool, args: list[str], stdin: object, log=None) -> str:
    """``word_tokenizer.py`` under the tool's interpreter, offline; its stdout."""
    hf_home = tool.root / "hf-home"
    try:
        out = subprocess.run([str(tool.python), str(TOKENIZER_SCRIPT), *args], input=json.dumps(stdin),
                             capture_output=True, text=True, timeout=120, env=tool.env(hf_home))
    except (OSError, subprocess.SubprocessError) as exc:
        raise LoadToolBuildError(f"{NAME}: the tokenizer script did not run: {exc}") from None
    if log is not None:
        log.write(out.stderr)
    if out.returncode != 0:
        raise LoadToolBuildError(f"{NAME}: word_tokenizer.py {args[0]} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


# Texts whose counts must agree: a mock answer, words outside the vocabulary, and the edges of the rule.
CHECK_TEXTS = (
    "".join(tokens.output_tokens(7, "a prompt", 40)),
    "explain the prefill route of a gateway between two clusters, then summarize it",
    "wait... what?!", "don't stop", "Hello,world", "naïve café — 東京 2024-11-24", "a\tb\nc  d", "",
)


def check_tokenizer(tool: LoadTool) -> None:
    """The tool's tokenizer counts as the mock does on CHECK_TEXTS (as inference-perf loads it), or an error."""
    counted = json.loads(_run_tokenizer(tool, ["count", str(tool.tokenizer)], list(CHECK_TEXTS)))
    wrong = [(t, n, tokens.count_tokens(t)) for t, n in zip(CHECK_TEXTS, counted) if n != tokens.count_tokens(t)]
    if wrong:
        raise LoadToolBuildError(f"{NAME}: the tokenizer does not count as the mock does: " + "; ".join(
            f"{t[:40]!r}: {n} (mock: {m})" for t, n, m in wrong))


def main(argv: list[str] | None = None) -> int:
    def find_root() -> Path | None:
        tool = find()
        return None if tool is None else tool.root

    def build_root(progress: Callable[[str], object] = print, *, force: bool = False) -> Path:
        return build(progress, force=force).root

    return build_main(argv, "python -m eppkit.builds.inference_perf", __doc__, find_root, build_root,
                      LoadToolBuildError)


if __name__ == "__main__":
    sys.exit(main())
