"""The session-end leak check (eppkit's pytest plugin) is real: it catches what a test leaves running.

Each case runs a whole pytest session in a subprocess, with the kit's plugin, over one small
test file, and looks at its exit status, its report and the process table afterwards; each case
runs once as a plain session and once under pytest-xdist (``-n 2``), where the worker that ran the
test checks and the controller reports, naming the worker:

| the test leaves behind | expected |
|---|---|
| nothing (starts and stops a managed process) | exit 0, no LEAK |
| a ManagedProcess it never stopped | exit 1, "LEAK: ([gwN] )eppkit processes ...", the process is gone after |
| a kit service it never stopped (forked by the session's zygote) | the same; the zygote itself is no leak, and goes too |
| a process no registry knows (started directly, in its own session) | exit 1, "LEAK: ([gwN] )processes of this session ...", gone after (xdist: or the controller's "processes of this run's workers ...") |
| a container it never stopped (docker runtime) | exit 1, "LEAK: ([gwN] )eppkit containers ...", the container is removed |
| (xdist) an orphan, then its worker dies | exit 1, the controller finds it by the worker's tag: "processes of this run's workers ...", naming what each worker's own look saw ("no report of its own look") |
| (xdist) a container, then its worker and the worker's watchdog die | exit 1, the controller finds it by its label: "containers of this run's workers ..." |

| one part of the check raises (e.g. reading /proc) | a LEAK line naming it; the other parts' findings kept |

These start processes (a ``sleep``, pytest itself), so they are marked integration.
"""

import json
import re
import sys
import textwrap

import pytest

from eppkit.core import procfs
from tests.support.inner import run_pytest

pytestmark = pytest.mark.integration

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
WORKERS = {"plain": (), "xdist": ("-n", "2")}


@pytest.fixture(params=list(WORKERS))
def workers(request) -> str:
    return request.param


def run_session(tmp_path, body: str, *extra_args: str) -> tuple[int, str]:
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(textwrap.dedent(body))
    return run_pytest(tmp_path, *extra_args, str(test_file), timeout_s=300)


def leak(workers: str, what: str) -> str:
    """The report's line for a leak: a worker's findings name the worker."""
    return "LEAK: " + (r"\[gw\d\] " if workers == "xdist" else "") + re.escape(what)


def require_docker() -> None:
    from eppkit.pytest_plugin.state import require
    from eppkit import runtimes

    ok, detail = runtimes.get("docker").available()
    require(ok, detail)


def container_gone(name: str) -> bool:
    from eppkit.components import container as containers

    return containers.find({"name": name}) == []


def test_a_clean_session_reports_no_leak(tmp_path, workers):
    code, out = run_session(tmp_path, f"""
        from eppkit.components.process import ManagedProcess

        def test_starts_and_stops(tmp_path):
            with ManagedProcess("sleeper", {SLEEPER!r}, tmp_path / "sleeper.log") as proc:
                assert proc.is_running()
    """, *WORKERS[workers])
    assert code == 0, out
    assert "LEAK" not in out, out


def test_a_managed_process_left_running_fails_the_session_and_is_stopped(tmp_path, workers):
    pid_file = tmp_path / "pid"
    code, out = run_session(tmp_path, f"""
        from eppkit.components.process import ManagedProcess

        def test_forgets_to_stop(tmp_path):
            proc = ManagedProcess("sleeper", {SLEEPER!r}, tmp_path / "sleeper.log").start()
            open({str(pid_file)!r}, "w").write(str(proc.pid))
    """, *WORKERS[workers])
    pid = int(pid_file.read_text())
    assert code == 1, out
    assert re.search(leak(workers, f"eppkit processes still running at session end: sleeper(pid {pid})"), out), out
    assert not procfs.alive(pid), "the leaked process must be stopped by the check"


def test_a_kit_service_left_running_is_reported_and_stopped_and_its_zygote_is_no_leak(tmp_path, workers):
    pids_file = tmp_path / "pids"
    code, out = run_session(tmp_path, f"""
        from eppkit.components import zygote
        from eppkit.components.process import ServiceProcess

        def test_forgets_to_stop(tmp_path):
            proc = ServiceProcess("eppkit.services.vllm", log_dir=tmp_path).start()
            open({str(pids_file)!r}, "w").write(f"{{proc.pid}} {{zygote.running_pid()}}")
    """, *WORKERS[workers])
    pid, zygote_pid = map(int, pids_file.read_text().split())
    assert code == 1, out
    assert re.search(leak(workers, f"eppkit processes still running at session end: vllm(pid {pid})"), out), out
    assert "processes of this session still running" not in out, out
    assert not procfs.alive(pid) and not procfs.alive(zygote_pid)


def test_a_process_no_registry_knows_is_found_by_its_session_tag(tmp_path, workers):
    # Started directly (as a CLI subprocess would start its children) and in its own session, so
    # neither the registry nor a process-group kill reaches it; the inherited tag does.
    pid_file = tmp_path / "pid"
    code, out = run_session(tmp_path, f"""
        import subprocess

        def test_leaves_an_orphan():
            proc = subprocess.Popen({SLEEPER!r}, start_new_session=True)
            open({str(pid_file)!r}, "w").write(str(proc.pid))
    """, *WORKERS[workers])
    pid = int(pid_file.read_text())
    assert code == 1, out
    found_by_worker = re.search(leak(workers, "processes of this session still running at its end"), out)
    # Twice in CI (never here: 36 tries, then 25,000 scans of /proc under a full suite's load) the xdist case's
    # orphan was reported by the controller's look for what workers left, by the same tag, rather than by its
    # worker's own check: the run still failed and the orphan was still named and killed, which is what a user
    # relies on. Two paths that lose the worker's report are closed (a part of its check that raised lost every
    # part's findings; one scan that missed the process ended the grace with nothing), and the controller's report
    # now says what each worker's own look saw, so a third time would say which.
    found_by_controller = workers == "xdist" and re.search(
        re.escape("LEAK: processes of this run's workers still running at its end") + r".*the workers' own looks: gw\d: ",
        out)
    assert found_by_worker or found_by_controller, out
    assert f"pid {pid}:" in out, out
    assert not procfs.alive(pid), "the orphan must be killed by the check"


def leave_a_container(name: str, out, then: str = "", labels: str = "{}") -> str:
    """An inner test that starts a container (the services image, sleeping), writes its name and labels to
    ``out``, and leaves it running; ``then``: what the test does after; ``labels``: extra labels (an expression)."""
    return f"""
        import json, os, signal
        from eppkit.runtimes import images
        from eppkit.components import container, reaper
        from eppkit.components.container import ManagedContainer

        def test_leaves_a_container(tmp_path):
            image = images.ensure(print).services
            c = ManagedContainer({name!r}, image, ["python", "-c", "import time; time.sleep(120)"],
                                 tmp_path / "c.log", extra_labels={labels}).start()
            open({str(out)!r}, "w").write(json.dumps([c.container_name, c.docker_container.labels]))
            {then}
    """


def test_a_container_left_running_fails_the_session_and_is_removed(tmp_path, workers):
    require_docker()
    out_file = tmp_path / "container"
    code, out = run_session(tmp_path, leave_a_container("leaky", out_file), *WORKERS[workers])
    name, labels = json.loads(out_file.read_text())
    assert code == 1, out
    assert re.search(leak(workers, "eppkit containers still there at session end (now removed): leaky"), out), out
    assert container_gone(name), f"{name} is still there"
    # Tagged with its session, and under xdist with its worker (what the controller's own look goes by).
    assert re.fullmatch(r"\d+-[0-9a-f]{12}" + (r"/gw\d" if workers == "xdist" else ""),
                        labels["eppkit.test-session"]), labels


def test_under_xdist_what_a_dead_worker_left_is_found_by_the_controller(tmp_path):
    # The worker dies at once (no finally, no leak check of its own), leaving a process of its own
    # session that no process group reaches: only its tag, which names this run, finds it.
    pid_file = tmp_path / "pid"
    code, out = run_session(tmp_path, f"""
        import os, subprocess

        def test_dies_leaving_an_orphan():
            proc = subprocess.Popen({SLEEPER!r}, start_new_session=True)
            open({str(pid_file)!r}, "w").write(str(proc.pid))
            os._exit(3)
    """, "-n", "2", "--max-worker-restart", "0")
    pid = int(pid_file.read_text())
    assert code == 1, out
    assert "LEAK: processes of this run's workers still running at its end (now killed)" in out, out
    assert f"pid {pid}:" in out, out
    # Its worker died before its own check: the controller says so (a worker whose check ran says what it saw).
    assert re.search(r"the workers' own looks: gw\d: no report of its own look", out), out
    assert not procfs.alive(pid), "the orphan must be killed by the controller's check"


def test_under_xdist_a_container_of_a_dead_worker_and_watchdog_is_removed_by_the_controller(tmp_path):
    # The worker's watchdog would remove the container when its worker dies; here both die at once,
    # so only the container's label, which names this run's worker, finds it.
    require_docker()
    out_file = tmp_path / "container"
    # Owned, as its label says, by the controller (alive until its check): another session's sweep of
    # orphaned containers (this suite's other workers) must not remove it first.
    code, out = run_session(tmp_path, leave_a_container(
        "stray", out_file, then="[w] = reaper.watchdogs(); os.kill(w.pid, signal.SIGKILL); w.wait(); os._exit(3)",
        labels='{"eppkit.owner": container.owner_id(os.getppid())}'), "-n", "2", "--max-worker-restart", "0")
    name, _ = json.loads(out_file.read_text())
    assert code == 1, out
    assert "LEAK: containers of this run's workers still there at its end (now removed): " in out, out
    assert name in out, out
    assert container_gone(name), f"{name} is still there"


def test_a_part_of_the_check_that_fails_is_reported_and_the_others_still_run(monkeypatch):
    """Each part of a session's own check (registries, tagged processes, containers) runs whatever another did:
    one that raises is a LEAK line of its own, which fails the run, and the others' findings are kept."""
    from eppkit.components import container, process, zygote
    from eppkit.pytest_plugin import leaks

    def broken(*args, **kwargs):
        raise RuntimeError("/proc went away")

    monkeypatch.setattr(leaks, "tagged_processes", broken)
    # This session's own processes and containers are not this check's to stop.
    monkeypatch.setattr(process, "live_processes", lambda: [])
    monkeypatch.setattr(zygote, "stop", lambda: None)
    monkeypatch.setattr(container, "live", lambda: [])
    monkeypatch.setattr(container, "remove_session", lambda: [])
    lines, looked = leaks.own_leaks()
    assert lines == ["the leak check's look at this session's tagged processes failed (RuntimeError: /proc went "
                     "away); what it would have found is unknown"], lines
    assert looked == "not done"
