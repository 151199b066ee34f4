"""A fresh machine, as it really is: README command 1 (and command 2, and CI) with every cache empty.

A new HOME holds every cache the kit and its tools use, set explicitly so nothing outlives it: pip's
(``PIP_CACHE_DIR``), Go's build and module caches and GOPATH (``GOCACHE``, ``GOMODCACHE``, ``GOPATH``), the kit's
(``XDG_CACHE_HOME``; eppkit keeps everything under it), Maven's local repository (``~/.m2`` under the new HOME)
and npm's. Toolchains stay what the machine has (Python, Go, Java, pyenv's interpreters: ``PYENV_ROOT`` is kept,
it is no cache). The checkout is cloned afresh into the new HOME, so no virtualenv or build of the checkout is
reused. Each step's time is printed as it ends, and all of them at the end (``--json`` writes them too).

    python -m bench.fresh_machine                   # README command 1, step by step
    python -m bench.fresh_machine --pytest          # then README command 2 (the whole suite), as a newcomer would
    python -m bench.fresh_machine --ci              # `CI=true bash .ci/run` on that fresh machine (a cold CI run)
    python -m bench.fresh_machine --keep /tmp/fresh # keep the new HOME (default: removed at the end)

Run it from a checkout (it clones that checkout's HEAD). What it cannot empty: Debian's packages (docker, chromium,
containerd, ... installed by .ci/run with apt) and docker's image store, which it leaves as they are; with ``--ci``
or ``--pytest`` it removes the kit's own images (``eppkit/*``) first, so that they are built again as on a new
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
README = CHECKOUT / "README.md"


def readme_command(number: int) -> str:
    """README's command ``number`` of "Two commands": the first line after its ``# N.`` comment block."""
    block = README.read_text().split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"# {number}."):
            command = next(x for x in lines[i + 1:] if x.strip() and not x.startswith("#"))
            return command.strip()
    raise SystemExit(f"README.md has no command {number} under 'Two commands'")


def fresh_env(home: Path) -> dict[str, str]:
    """The machine's environment with every cache inside ``home`` (and nothing of a virtualenv around us)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "EPPKIT_", "PYTEST_", "PIP_", "GO", "XDG_", "CONDA"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not os.environ.get("VIRTUAL_ENV")
            or not p.startswith(os.environ["VIRTUAL_ENV"])]
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    env.update({
        "HOME": str(home), "PATH": os.pathsep.join(path), "PYENV_ROOT": pyenv_root,
        "XDG_CACHE_HOME": str(home / ".cache"), "PIP_CACHE_DIR": str(home / ".cache" / "pip"),
        "GOPATH": str(home / "go"), "GOMODCACHE": str(home / "go" / "pkg" / "mod"),
        "GOCACHE": str(home / ".cache" / "go-build"), "npm_config_cache": str(home / ".npm"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    return env


def steps_of(command: str) -> list[str]:
    """A README command's steps (its ``&&`` parts): each timed on its own, in one shell so ``.`` carries over."""
    return [part.strip() for part in re.split(r"\s&&\s", command)]


def run_steps(steps: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[list[dict], int]:
    """Each step in one bash, timed by bash itself, until one fails: (each step's time, the exit code). Their
    output goes to ``log``."""
    marker = "@@fresh-machine-step"
    script = []
    for i, step in enumerate(steps):
        script += ["t0=$(date +%s.%N)", step, "rc=$?", f'echo "{marker} {i} $(date +%s.%N) $t0 $rc"',
                   '[ "$rc" = 0 ] || exit "$rc"']
    times: list[dict] = []
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith(marker):
                out.write(line)
                out.flush()
                continue
            _, index, end, start, rc = line.split()
            times.append({"step": steps[int(index)], "seconds": round(float(end) - float(start), 1), "exit": int(rc)})
            print(f"  {times[-1]['seconds']:7.1f} s  {times[-1]['step']}" + (f"  (exit {rc})" if rc != "0" else ""),
                  flush=True)
    return times, proc.wait()


def failed(what: str, rc: int, log: Path) -> None:
    tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
    print(f"{what} failed (exit {rc})\n--- last lines of {log} ---\n{tail}", flush=True)


def pytest_counts(log: Path) -> str:
    """pytest's closing line, from the log."""
    lines = [x for x in log.read_text().splitlines() if re.search(r"\b(passed|failed|error)", x) and " in " in x]
    return lines[-1].strip("= ") if lines else "no closing line"


def remove_kit_images() -> None:
    """The kit's docker images (eppkit/*), so a CI run builds them as a new machine does; nothing else."""
    if shutil.which("docker") is None:
        return
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, check=False)
    ours = [x for x in listed.stdout.split() if x.startswith("eppkit")]
    if ours:
        subprocess.run(["docker", "rmi", "-f", *ours], capture_output=True, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fresh_machine", description=__doc__.split("\n")[0])
    ap.add_argument("--pytest", action="store_true", help="then README command 2, the whole suite")
    ap.add_argument("--ci", action="store_true", help="instead: `CI=true bash .ci/run` on the fresh machine")
    ap.add_argument("--keep", type=Path, help="make the new HOME here and keep it")
    ap.add_argument("--json", type=Path, help="write the times here")
    args = ap.parse_args(argv)
    home = args.keep or Path(tempfile.mkdtemp(prefix="eppkit-fresh-home."))
    home.mkdir(parents=True, exist_ok=True)
    env = fresh_env(home)
    clone = home / "eppkit"
    subprocess.run(["git", "clone", "--quiet", str(CHECKOUT), str(clone)], check=True, env=env)
    load = os.getloadavg()
    print(f"fresh machine: HOME={home} ({os.cpu_count()} cores, load {load[0]:.2f} at the start); clone of "
          f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=CHECKOUT, capture_output=True, text=True, check=False).stdout.strip()}",
          flush=True)
    result: dict = {"home": str(home), "cores": os.cpu_count(), "load_at_start": round(load[0], 2), "steps": []}
    started, rc = time.monotonic(), 0
    try:
        if args.ci or args.pytest:  # a new machine's docker engine has none of the kit's images
            remove_kit_images()
        if args.ci:
            ci_env = {**env, "CI": "true"}
            print("cold CI: CI=true bash .ci/run (its own steps print their times)", flush=True)
            result["steps"], rc = run_steps(["bash .ci/run"], clone, ci_env, home / "ci.log")
            if rc:
                failed("CI", rc, home / "ci.log")
        else:
            first = readme_command(1)
            print(f"README command 1: {first}", flush=True)
            result["steps"], rc = run_steps(steps_of(first), clone, env, home / "command-1.log")
            if rc:
                failed("README command 1", rc, home / "command-1.log")
                return 1
            result["command_1_s"] = round(sum(s["seconds"] for s in result["steps"]), 1)
            print(f"README command 1: {result['command_1_s']:.1f} s", flush=True)
            if args.pytest:
                second = readme_command(2)
                print(f"README command 2: {second}", flush=True)
                log = home / "command-2.log"
                times, rc = run_steps([". .venv/bin/activate", second], clone, env, log)
                result["steps"] += times
                result["command_2_s"] = times[-1]["seconds"]
                result["command_2"] = pytest_counts(log)
                print(f"README command 2: {result['command_2_s']:.1f} s: {result['command_2']}", flush=True)
                if rc:
                    failed("README command 2", rc, log)
    finally:
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["load_at_end"] = round(os.getloadavg()[0], 2)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)
        if args.keep is None:
            shutil.rmtree(home, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
