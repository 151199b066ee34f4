"""The benchmark's own tools, built once from their Go modules into ~/.cache/eppkit/bin (never committed).

| tool | module @ version | why |
|---|---|---|
| vegeta | github.com/tsenart/vegeta/v12 @ v12.12.0 | fixed-rate open-loop HTTP load generator with per-request latencies; Go, so it is not the bottleneck on 2 cores |
| llm-d-inference-sim | github.com/llm-d/llm-d-inference-sim @ v0.10.2 | the peer mock vLLM the kit's mock is measured against |

Both are built as Jaeger is (testbed/jaeger.py): ``go mod download`` the pinned version, then
``go build`` inside the module folder. ``go install module@version`` does not work through a
proxy that refuses the module's version list (it looks the list up for deprecation notices).
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

from eppkit.paths import cache_dir


@dataclass(frozen=True)
class GoTool:
    name: str
    module: str
    version: str
    package: str  # inside the module, e.g. "." or "./cmd/llm-d-inference-sim"

    @property
    def path(self) -> Path:
        return cache_dir() / "bin" / f"{self.name}-{self.version}"


VEGETA = GoTool("vegeta", "github.com/tsenart/vegeta/v12", "v12.12.0", ".")
INFERENCE_SIM = GoTool("llm-d-inference-sim", "github.com/llm-d/llm-d-inference-sim", "v0.10.2",
                       "./cmd/llm-d-inference-sim")


class BuildFailed(RuntimeError):
    pass


def find(tool: GoTool) -> Path | None:
    env = os.environ.get(f"EPPKIT_{tool.name.upper().replace('-', '_')}")
    if env:
        return Path(env) if Path(env).is_file() else None
    return tool.path if tool.path.is_file() else None


def build(tool: GoTool, progress: Callable[[str], None] = print, timeout_s: float = 900.0) -> Path:
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
    partial = target.with_name(target.name + ".partial")
    progress(f"{tool.name}: building {tool.package} (once; cached in {target.parent}) ...")
    proc = subprocess.run([go, "build", "-trimpath", "-o", str(partial), tool.package], cwd=module_dir,
                          capture_output=True, text=True, env=env,
                          timeout=max(60.0, timeout_s - (time.monotonic() - started)))
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith("go: downloading")]
        raise BuildFailed(f"{tool.name}: go build failed:\n" + "\n".join(lines[-30:]))
    partial.rename(target)
    progress(f"{tool.name}: built in {time.monotonic() - started:.0f} s -> {target}")
    return target
