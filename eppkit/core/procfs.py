"""Processes as Linux's /proc shows them: is one alive, which are a process's children.

A zombie (exited, not yet reaped) counts as gone: it runs nothing and holds no port.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits (PR_SET_PDEATHSIG); for a child between fork and exec."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _live_children() -> dict[int, set[int]]:
    """Every live process's pid, by its parent's pid (one pass over /proc)."""
    kids: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields is not None and fields[0] != "Z":
                kids.setdefault(int(fields[1]), set()).add(int(entry))
    return kids


def children(pid: int) -> set[int]:
    """Every live process whose parent is ``pid``."""
    return _live_children().get(pid, set())


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid``: its children, theirs, and so on (one pass over /proc)."""
    kids = _live_children()
    found: set[int] = set()
    todo = [pid]
    while todo:
        new = kids.get(todo.pop(), set()) - found
        found |= new
        todo.extend(new)
    return found


def group_members(pgid: int) -> list[int]:
    """Every live process of process group ``pgid`` (a server started in its own session and its children)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(entry))
    return sorted(out)


def name(pid: int) -> str | None:
    """The process's command name (/proc/<pid>/comm: vLLM renames its engine ``VLLM::EngineCore``), or None."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


# Every process a test session starts carries this variable (a ManagedProcess passes os.environ on, and
# children inherit it, including what a CLI run as a subprocess starts); the pytest plugin's leak check
# finds them by it, whether or not any registry knows them. Its value is the session's tag; under
# pytest-xdist a worker's is ``<the controller's tag>/<worker id>`` (eppkit.pytest_plugin.parallel).
SESSION_TAG = "EPPKIT_TEST_SESSION"


def tagged(tag: str, *, workers: bool = False, spared: set[int] = frozenset()) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying ``SESSION_TAG=<tag>`` (with ``workers``: a
    worker's tag under it, ``<tag>/...``), except ``spared``; /proc holds a process's environment as it
    was at its start."""
    if not tag or not os.path.isdir("/proc"):
        return []
    needle = f"{SESSION_TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if not any(v.startswith(needle + b"/") if workers else v == needle for v in env):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if alive(int(entry)):
            found.append((int(entry), cmdline))
    return found


def tag_of(pid: int) -> str | None:
    """The ``SESSION_TAG`` a process carries (its environment at its start), or None."""
    prefix = f"{SESSION_TAG}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    return next((v[len(prefix):].decode(errors="replace") for v in env if v.startswith(prefix)), None)


INOTIFY_LIMIT = "/proc/sys/fs/inotify/max_user_instances"


def inotify_instances() -> tuple[int | None, dict[str, int]]:
    """The per-user limit of inotify instances (None where unknown) and the instances this machine's
    visible processes hold, by command name. Envoy takes one per watched endpoint file; the limit
    counts every process of a user, containers' included (Linux's default is 128)."""
    try:
        with open(INOTIFY_LIMIT) as f:
            limit: int | None = int(f.read())
    except (OSError, ValueError):
        limit = None
    held: dict[str, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        count = sum(1 for target in descriptors(int(entry)).values() if target == "anon_inode:inotify")
        if count:
            comm = name(int(entry)) or entry
            held[comm] = held.get(comm, 0) + count
    return limit, held


def descriptors(pid: int) -> dict[int, str]:
    """What ``pid`` holds open, by descriptor: what /proc/<pid>/fd/<n> links to (``pipe:[123]``,
    ``anon_inode:[eventpoll]``, a path). A descriptor closed while this reads, or a process gone or not
    ours to read, is left out: /proc changes between listing a folder and reading what is in it."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    held = {}
    for fd in fds:
        try:
            held[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (OSError, ValueError):
            continue
    return held


def epoll_watches(pid: int, fd: int) -> list[str] | None:
    """The inodes an epoll descriptor of ``pid`` watches (/proc/<pid>/fdinfo/<fd>'s ``ino:`` fields), or
    None when the descriptor is gone."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            return sorted(part[4:] for part in f.read().split() if part.startswith("ino:") and part != "ino:")
    except OSError:
        return None
