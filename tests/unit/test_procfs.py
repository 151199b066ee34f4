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
