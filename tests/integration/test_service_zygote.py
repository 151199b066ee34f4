"""Kit services forked from the zygote (eppkit.components.zygote) behave as ``python -m`` would.

| a kit service started by a ManagedProcess | expected |
|---|---|
| runs | a child of the zygote (not of this process), leading its own process group, its output in its log |
| its open descriptors | none of the zygote's (its protocol pipes, its wake-up pipe, its epoll) |
| exits by itself (``--help``, a bad flag) | its exit code: 0, 2 (argparse), as `python -m` gives |
| stopped (SIGINT to its group) | a clean exit 0 |
| its zygote is killed | the service dies with it; its handle says it was killed |
| a PYTHON* setting of its own, or EPPKIT_SERVICE_START=exec | its own interpreter, this process's child |
| not a kit service (another program) | its own process, as always |
| a process forked from the session starts one | a zygote of its own; the session's is left alone |
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from eppkit.components import zygote
from eppkit.components.process import ManagedProcess, ServiceProcess
from eppkit.core import procfs

pytestmark = pytest.mark.integration

VLLM = [sys.executable, "-m", "eppkit.services.vllm"]


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_kit_service_is_forked_from_the_zygote_in_its_own_group(tmp_path):
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path) as proc:
        assert ppid(proc.pid) == zygote.running_pid() != os.getpid()
        assert os.getpgid(proc.pid) == proc.pid
        assert "listening on http://127.0.0.1:" in proc.read_log()
        code = proc.stop()
    assert code == 0, proc.read_log()
    assert not procfs.alive(proc.pid)


def descriptors(pid: int) -> set[str]:
    """What a process holds open: a pipe by its inode, an epoll by the inodes it watches. A descriptor the
    process closes while this reads is left out (procfs.descriptors): its threads open and close them."""
    held = set()
    for fd, target in procfs.descriptors(pid).items():
        if target == "anon_inode:[eventpoll]":  # every epoll reads the same here: name it by what it watches
            watched = procfs.epoll_watches(pid, fd)
            if watched is None:
                continue
            target = f"epoll watching {','.join(watched)}"
        held.add(target)
    return held


def test_a_forked_service_keeps_none_of_the_zygotes_descriptors(tmp_path):
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path) as proc:
        private = {d for d in descriptors(zygote.running_pid()) if d.startswith(("pipe:", "epoll"))}
        assert any(d.startswith("epoll") for d in private), private
        assert not descriptors(proc.pid) & private, descriptors(proc.pid) & private


@pytest.mark.parametrize("args, code, says", [(["--help"], 0, "usage: python -m eppkit.services.vllm"),
                                              (["--no-such-flag"], 2, "unrecognized arguments: --no-such-flag")])
def test_a_forked_service_that_exits_gives_its_exit_code_and_output(tmp_path, args, code, says):
    proc = ManagedProcess("vllm", [*VLLM, *args], tmp_path / "vllm.log").start()
    try:
        assert proc._proc.wait(timeout=30) == code
        assert says in proc.read_log()
    finally:
        proc.stop()


def test_a_forked_service_dies_with_its_zygote(tmp_path):
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path) as proc:
        os.kill(zygote.running_pid(), signal.SIGKILL)
        assert proc._proc.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while procfs.alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not procfs.alive(proc.pid)
    # The next service gets a new zygote.
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path / "again") as again:
        assert ppid(again.pid) == zygote.running_pid()


@pytest.mark.parametrize("env", [{"PYTHONPATH": "/nonexistent"}, {"PYTHONHASHSEED": "12345"}])
def test_a_service_with_a_python_setting_of_its_own_gets_its_own_interpreter(tmp_path, env):
    proc = ManagedProcess("vllm", [*VLLM, "--help"], tmp_path / "vllm.log").with_env(**env).start()
    try:
        assert ppid(proc.pid) == os.getpid()
        assert proc._proc.wait(timeout=30) == 0
    finally:
        proc.stop()


def test_exec_start_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv(zygote.ENV, "exec")
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path) as proc:
        assert ppid(proc.pid) == os.getpid()


def test_a_program_started_from_a_thread_outlives_that_thread(tmp_path):
    # Linux's parent-death signal follows the thread that forked: a testbed started from a worker thread (the
    # conformance suite runs each client protocol in one) lost its Envoy when that thread ended.
    started = []
    thread = threading.Thread(target=lambda: started.append(
        ManagedProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.log").start()))
    thread.start()
    thread.join()
    proc = started[0]
    try:
        time.sleep(0.5)
        assert proc.is_running(), proc.read_log()
    finally:
        proc.stop()


def test_another_program_is_not_forked(tmp_path):
    with ManagedProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.log") as proc:
        assert ppid(proc.pid) == os.getpid()


def test_a_process_forked_from_the_session_gets_a_zygote_of_its_own_and_leaves_the_sessions_alone(tmp_path):
    with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path) as proc:
        sessions = zygote.running_pid()
        pid = os.fork()
        if pid == 0:  # the forked process: a service of its own, from a zygote of its own, then its exit's stop
            code = 1
            try:
                with ServiceProcess("eppkit.services.vllm", log_dir=tmp_path / "forked") as its_own:
                    code = 0 if ppid(its_own.pid) == zygote.running_pid() != sessions else 3
                zygote.stop()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert zygote.running_pid() == sessions and procfs.alive(sessions) and proc.is_running()
