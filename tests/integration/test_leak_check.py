"""The session-end leak check (eppkit's pytest plugin) is real: it catches what a test leaves running.

Each case runs a whole pytest session in a subprocess, with the kit's pytest plugin, over one small
test file, and looks at its exit status, its report and the process table afterwards:

| the test leaves behind | expected |
|---|---|
| nothing (starts and stops a managed process) | exit 0, no LEAK |
| a ManagedProcess it never stopped | exit 1, "LEAK: eppkit processes ...", the process is gone after |
| a process no registry knows (started directly, in its own session) | exit 1, "LEAK: processes of this session ...", gone after |
| a container it never stopped (docker runtime) | exit 1, "LEAK: eppkit containers ...", the container is removed |

These start processes (a ``sleep``, pytest itself), so they are marked integration.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eppkit.core import procfs
from eppkit.pytest_plugin.state import SESSION_TAG

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: subprocesses run from here


pytestmark = pytest.mark.integration

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def run_session(tmp_path, body: str, *extra_args: str) -> tuple[int, str]:
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(textwrap.dedent(body))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), *extra_args, str(test_file)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
        # its own session tag: inheriting this session's would make this session's processes (a shared
        # Jaeger of earlier tests) the inner session's leaks
        env={**{k: v for k, v in os.environ.items() if k != SESSION_TAG}, "EPPKIT_RUNS": str(tmp_path / "runs")},
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_clean_session_reports_no_leak(tmp_path):
    code, out = run_session(tmp_path, f"""
        from eppkit.components.process import ManagedProcess

        def test_starts_and_stops(tmp_path):
            with ManagedProcess("sleeper", {SLEEPER!r}, tmp_path / "sleeper.log") as proc:
                assert proc.is_running()
    """)
    assert code == 0, out
    assert "LEAK" not in out, out


def test_a_managed_process_left_running_fails_the_session_and_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    code, out = run_session(tmp_path, f"""
        from eppkit.components.process import ManagedProcess

        def test_forgets_to_stop(tmp_path):
            proc = ManagedProcess("sleeper", {SLEEPER!r}, tmp_path / "sleeper.log").start()
            open({str(pid_file)!r}, "w").write(str(proc.pid))
    """)
    pid = int(pid_file.read_text())
    assert code == 1, out
    assert f"LEAK: eppkit processes still running at session end: sleeper(pid {pid})" in out, out
    assert not procfs.alive(pid), "the leaked process must be stopped by the check"


def test_a_process_no_registry_knows_is_found_by_its_session_tag(tmp_path):
    # Started directly (as a CLI subprocess would start its children) and in its own session, so
    # neither the registry nor a process-group kill reaches it; the inherited tag does.
    pid_file = tmp_path / "pid"
    code, out = run_session(tmp_path, f"""
        import subprocess

        def test_leaves_an_orphan():
            proc = subprocess.Popen({SLEEPER!r}, start_new_session=True)
            open({str(pid_file)!r}, "w").write(str(proc.pid))
    """)
    pid = int(pid_file.read_text())
    assert code == 1, out
    assert "LEAK: processes of this session still running at its end" in out and f"pid {pid}:" in out, out
    assert not procfs.alive(pid), "the orphan must be killed by the check"


def test_a_container_left_running_fails_the_session_and_is_removed(tmp_path):
    from eppkit.components import container as containers
    from eppkit.pytest_plugin.state import require
    from eppkit.runtimes import docker as docker_runtime

    ok, detail = docker_runtime.available()
    require(ok, detail)
    name_file = tmp_path / "name"
    code, out = run_session(tmp_path, f"""
        from eppkit.runtimes import images
        from eppkit.components.container import ManagedContainer

        def test_forgets_to_stop_a_container(tmp_path):
            image = images.ensure(print).services
            c = ManagedContainer("leaky", image, ["python", "-c", "import time; time.sleep(120)"],
                                 tmp_path / "leaky.log").start()
            open({str(name_file)!r}, "w").write(c.container_name)
    """)
    name = name_file.read_text()
    assert code == 1, out
    assert "LEAK: eppkit containers still there at session end (now removed): leaky" in out, out
    client = containers.docker_client()
    try:
        assert client.containers.list(all=True, filters={"name": name}) == [], f"{name} is still there"
    finally:
        client.close()
