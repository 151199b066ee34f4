"""A whole pytest session in a subprocess, with the kit's plugin, over test files a test wrote: how the
plugin's own behaviour (leak check, failure reports, the live UI, pytest-xdist) is tested as a user meets it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: the session runs from here
# Not inherited: the session's own tag (else this session's processes, a shared Jaeger of earlier tests,
# would be the inner session's leaks) and the pytest-xdist worker's identity (its run folders' names).
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
OUTER_ONLY = ("EPPKIT_TEST_SESSION", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def session_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment for an inner session: without what is the outer session's only, run folders
    under ``tmp_path/runs``."""
    return {**{k: v for k, v in os.environ.items() if k not in OUTER_ONLY}, "EPPKIT_RUNS": str(tmp_path / "runs"),
            **extra}


def run_pytest(tmp_path: Path, *args: str, timeout_s: float = 600) -> tuple[int, str]:
    """``python -m pytest -q --rootdir <tmp_path> <args>`` (:func:`session_env`): its exit status and its
    output (stdout and stderr)."""
    proc = subprocess.run(
        [*PYTEST, "--rootdir", str(tmp_path), *args], capture_output=True, text=True, cwd=REPO_ROOT,
        timeout=timeout_s, env=session_env(tmp_path))
    return proc.returncode, proc.stdout + proc.stderr
