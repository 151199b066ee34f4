"""What every build of the kit's cache shares: a build step run into a log with a heartbeat and a time limit, the Go
version a build records, and the command line of a cached build (``python -m eppkit.builds.<name>``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eppkit.core.progress import say

HEARTBEAT_S = 15.0
BUILD_TIMEOUT_S = 900.0


class BuildError(RuntimeError):
    """A build of the kit's cache failed; the message carries the log tail and a hint."""


def run_step(progress: Callable[[str], object], log, what: str, cmd: list[str], cwd: Path, env: dict[str, str], *,
             label: str, hint: str, error: type[Exception] = BuildError, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """Run one build command into ``log``, with a heartbeat on ``progress``; ``error`` with the log tail on failure."""
    progress(f"{label}: {what} ...")
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    next_beat = t0 + HEARTBEAT_S
    while True:
        try:
            rc = proc.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now - t0 > timeout_s:
                proc.kill()
                proc.wait()
                rc = None
                break
            if now >= next_beat:
                progress(f"{label}:   still {what.split(' (')[0]} ({now - t0:.0f} s)")
                next_beat = now + HEARTBEAT_S
    log.flush()
    if rc != 0:
        tail = "".join(Path(log.name).read_text().splitlines(keepends=True)[-40:])
        why = f"timed out after {timeout_s:.0f} s" if rc is None else f"exited {rc}"
        raise error(
            f"{label} build failed: `{' '.join(cmd)}` {why} (in {cwd}).\n"
            f"--- last lines of {log.name} ---\n{tail}--- end ---\nHint: {hint}."
        )
    progress(f"{label}:   done in {time.monotonic() - t0:.1f} s")


@contextmanager
def build_folder(out: Path, failed_log: Path) -> Iterator[tuple[Path, object, dict]]:
    """A folder beside ``out`` to build into, its build log (open) and a dict for build-info.json. When the block
    ends well the folder, with build-info.json (the dict and the seconds), replaces ``out`` and its scratch folders
    (``wrapper``, ``*-wrapper``) go; when it fails its log is kept at ``failed_log`` and the folder goes."""
    tmp = Path(tempfile.mkdtemp(prefix="build.", dir=out.parent))
    tmp.chmod(0o755)
    log_path = tmp / "build.log"
    info: dict = {}
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            yield tmp, log, info
        (tmp / "build-info.json").write_text(json.dumps({**info, "seconds": round(time.monotonic() - started, 1)},
                                                        indent=2) + "\n")
        for scratch in [*tmp.glob("*-wrapper"), *tmp.glob("wrapper")]:
            shutil.rmtree(scratch)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        if log_path.exists():
            shutil.copyfile(log_path, failed_log)
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def go_for_build(error: type[Exception], missing: str, **env: str) -> tuple[str, dict[str, str]]:
    """``go`` and the environment of a pinned, reproducible build (no toolchain download, no VCS stamp; ``env``
    added); ``error`` saying ``missing`` when Go is not on PATH."""
    go = shutil.which("go")
    if go is None:
        raise error(f"{missing}\n`go` is not on PATH (https://go.dev/dl/).")
    return go, {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false", **env}


def go_version(go: str, env: dict[str, str]) -> str:
    try:
        return subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"



def build_main(argv: list[str] | None, prog: str, doc: str, find: Callable[[], Path | None],
               build: Callable[..., Path], error: type[Exception]) -> int:
    """The command line of a cached build (``python -m eppkit.builds.<name>``): build or reuse and print
    the path; ``--find`` only prints an existing build; ``--force`` rebuilds."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ap.add_argument("--find", action="store_true", help="only print the path of an existing build")
    ap.add_argument("--force", action="store_true", help="rebuild even if a build exists")
    args = ap.parse_args(argv)
    if args.find:
        path = find()
        if path is None:
            print("not built", file=sys.stderr)
            return 1
        print(path)
        return 0
    try:
        print(build(say, force=args.force))
    except error as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
