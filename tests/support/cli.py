"""`eppkit` as a subprocess, the way a person runs it (shared by test_cli and test_docker_cleanup)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: subprocesses run from here
EPPKIT = [sys.executable, "-m", "eppkit"]


def start_up(args: list[str], runs: Path, timeout_s: float) -> tuple[subprocess.Popen, str | None, list[str]]:
    """`eppkit up <args>` in the background, read until it says Ctrl-C to stop (or ends, or ``timeout_s``).

    Returns the process, Envoy's URL as it printed it (None if it never did) and the lines read.
    """
    env = {**os.environ, "EPPKIT_RUNS": str(runs)}
    proc = subprocess.Popen(EPPKIT + ["up", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=REPO_ROOT)
    lines, envoy_url = [], None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # one line at a time: readline blocks, so no poll() here
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"Envoy\s+(http://\S+)", line)
        if m:
            envoy_url = m.group(1)
        if "Ctrl-C to stop" in line:
            break
    return proc, envoy_url, lines
