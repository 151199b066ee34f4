"""eppkit.core.procfs reads /proc, which changes while it reads: what vanishes in between is left out.

| /proc changes between the listing and the read | expected |
|---|---|
| a descriptor is closed after ``fd/`` was listed | the others are returned, that one is left out |
| the process is gone | no descriptors, no error |
| an epoll descriptor is closed before its fdinfo is read | None |
"""

import os

import pytest

from eppkit.core import procfs

pytestmark = pytest.mark.unit


def test_a_descriptor_closed_between_the_listing_and_its_readlink_is_left_out(monkeypatch):
    read, write = os.pipe()
    try:
        real_readlink = os.readlink

        def closed_meanwhile(path, *args, **kwargs):
            if path.endswith(f"/fd/{read}"):
                raise FileNotFoundError(path)
            return real_readlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "readlink", closed_meanwhile)
        held = procfs.descriptors(os.getpid())
    finally:
        os.close(read)
        os.close(write)
    assert read not in held
    assert held[write].startswith("pipe:[")


def test_a_process_that_is_gone_holds_nothing():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert procfs.descriptors(pid) == {}


def test_an_epoll_closed_before_its_fdinfo_is_read_is_none():
    import select

    poller = select.epoll()
    read, write = os.pipe()
    try:
        poller.register(read, select.EPOLLIN)
        inode = format(os.fstat(read).st_ino, "x")  # fdinfo gives the watched inode in hex
        assert procfs.epoll_watches(os.getpid(), poller.fileno()) == [inode]
        fd = poller.fileno()
    finally:
        poller.close()
        os.close(read)
        os.close(write)
    assert procfs.epoll_watches(os.getpid(), fd) is None


def _gone_pid() -> int:
    """A pid no process has: a child's, once it exited and was reaped."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_what_a_live_process_shows_and_a_gone_one_leaves_out():
    me, gone = os.getpid(), _gone_pid()
    assert procfs.cpu_seconds(me) > 0 and procfs.cpu_seconds(gone) is None
    assert procfs.cpu_seconds(me, children=True) >= procfs.cpu_seconds(me)
    assert procfs.start_ticks(me).isdigit() and procfs.start_ticks(gone) == ""
    parent, _, rss = procfs.parent_cpu_rss(me)
    assert parent == os.getppid() and rss > 0 and procfs.parent_cpu_rss(gone) is None
    assert set(procfs.status_kib(me, "VmRSS", "VmHWM")) == {"VmRSS", "VmHWM"} and procfs.status_kib(gone, "VmRSS") == {}
    assert procfs.smaps_kib(me).get("Pss", 0) > 0 and procfs.smaps_kib(gone) == {}
    assert f"PATH={os.environ['PATH']}".encode() in procfs.environ(me) and procfs.environ(gone) == []
    assert procfs.argv(me)[0].endswith(("python", "python3", "pytest")) or "python" in procfs.argv(me)[0]
    assert procfs.argv(gone) is None and procfs.cmdline(gone) is None
    assert me in procfs.pids() and gone not in procfs.pids()


def test_the_machine_as_proc_describes_it():
    assert procfs.meminfo_kib("MemTotal") > procfs.meminfo_kib("MemAvailable") > 0
    assert procfs.meminfo_kib("NoSuchField") is None
    model, _ = procfs.cpu_model()
    assert model and procfs.machine_cpu_seconds()["busy"] > 0
    low, high = procfs.local_port_range()
    assert 0 < low < high < 65536
    assert procfs.boot_id() != "unknown" and procfs.pid_namespace().isdigit()
