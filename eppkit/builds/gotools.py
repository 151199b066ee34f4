"""Go programs the kit builds once from their modules into ``~/.cache/eppkit/bin`` (never committed).

Built as Jaeger is (:mod:`eppkit.components.jaeger`): ``go mod download`` the pinned version, then ``go build``
inside the module folder. ``go install module@version`` does not work through a proxy that refuses
the module's version list (it looks the list up for deprecation notices). ``EPPKIT_<NAME>`` (the
name upper-cased, dashes as underscores; each a field of :class:`eppkit.core.settings.Settings`, a tool without one
is an error naming its variable) points at a binary of your own instead.

Used by the llm-d-inference-sim backend preset (:mod:`eppkit.backends.inference_sim`) and by ``bench/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from eppkit.core.paths import cache_dir
from eppkit.core.settings import settings


@dataclass(frozen=True)
class GoTool:
    name: str
    module: str
    version: str
    package: str  # inside the module, e.g. "." or "./cmd/llm-d-inference-sim"

    @property
    def path(self) -> Path:
        return cache_dir() / "bin" / f"{self.name}-{self.version}"

    @property
    def env_var(self) -> str:
        return f"EPPKIT_{self.name.upper().replace('-', '_')}"


class BuildFailed(RuntimeError):
    pass


def find(tool: GoTool) -> Path | None:
    """$EPPKIT_<NAME> when set (None if it names no file), else the cached build, else None."""
    given = settings().of(tool.env_var)
    if given:
        return given if given.is_file() else None
    return tool.path if tool.path.is_file() else None


def build(tool: GoTool, progress: Callable[[str], None] = print, timeout_s: float = 1800.0) -> Path:
    """The tool's binary, built now unless cached. Raises BuildFailed with the Go error's tail."""
    found = find(tool)
    if found is not None:
        return found
    go = shutil.which("go")
    if go is None:
        raise BuildFailed(f"{tool.name}: Go is not on PATH (https://go.dev/dl/)")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    progress(f"{tool.name}: downloading {tool.module}@{tool.version} ...")
    started = time.monotonic()
    dl = subprocess.run([go, "mod", "download", "-json", f"{tool.module}@{tool.version}"],
                        capture_output=True, text=True, env=env, timeout=timeout_s)
    if dl.returncode != 0:
        raise BuildFailed(f"{tool.name}: go mod download failed:\n{(dl.stdout + dl.stderr)[-2000:]}")
    module_dir = json.loads(dl.stdout)["Dir"]
    target = tool.path
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"{tool.name}: building {tool.package} (once; cached in {target.parent}; minutes on a busy machine) ...")
    go_build(go, module_dir, target, tool.package, env=env, name=tool.name,
             timeout_s=max(60.0, timeout_s - (time.monotonic() - started)))
    progress(f"{tool.name}: built in {time.monotonic() - started:.0f} s -> {target}")
    return target


def go_build(go: str, cwd: str | Path, target: Path, package: str = ".", *, env: dict[str, str], name: str,
             timeout_s: float, error: type[Exception] = BuildFailed) -> None:
    """``go build -trimpath`` of ``package`` in ``cwd`` into ``target`` (written whole or not at all); ``error``
    with the Go error's tail when it fails."""
    partial = target.with_name(target.name + ".partial")
    proc = subprocess.run([go, "build", "-trimpath", "-o", str(partial), package], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=timeout_s)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith("go: downloading")]
        raise error(f"{name}: go build failed:\n" + "\n".join(lines[-30:]))
    partial.rename(target)
