"""Linux's /proc, read in one place: is a process alive, its children, its CPU and memory, its environment and
descriptors; the machine's CPUs, memory and identity (every other module and bench/ ask here).

A zombie (exited, not yet reaped) counts as gone: it runs nothing and holds no port. A process or descriptor
that vanishes while this reads is left out (None, empty), never an error: /proc changes between two reads.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from eppkit.core.settings import Settings

_PR_SET_PDEATHSIG = 1
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits (PR_SET_PDEATHSIG); for a child between fork and exec."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that it is SIGKILLed when its parent exits, set by ``setpriv --pdeathsig`` (util-linux) as
    it execs: the same as :func:`die_with_parent` in a ``preexec_fn``, but without one, so ``subprocess`` can
    ``vfork``. A ``preexec_fn`` forces a real ``fork()``, which runs every ``pthread_atfork`` handler of the
    parent, and gRPC's waits for its own threads: a process that holds a gRPC channel can deadlock in that
    ``fork()`` (seen in an xdist worker starting Envoy). ``argv`` unchanged where setpriv is missing."""
    import shutil

    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pids() -> list[int]:
    """Every process this /proc shows."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()] if os.path.isdir("/proc") else []


def cpu_seconds(pid: int | None, *, children: bool = False) -> float | None:
    """User + system CPU a process (all its threads) has used so far; with ``children``, also its exited and
    waited-for children's. None when it is gone."""
    fields = _stat(pid) if pid else None
    if fields is None:
        return None
    return sum(int(x) for x in fields[11:15 if children else 13]) / TICK


def start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); '' if gone."""
    fields = _stat(pid)
    return fields[19] if fields is not None else ""


def parent_cpu_rss(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds of it and its waited-for children, resident bytes) of a live process; None if gone."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK, int(fields[21]) * PAGE


def status_kib(pid: int, *keys: str) -> dict[str, int]:
    """Fields of /proc/<pid>/status in KiB (``VmRSS``, ``VmHWM``, ...); those it lacks, or all if it is gone, left out."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in keys:
                    out[key] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def tree_status(pid: int, *keys: str) -> dict[str, int]:
    """:func:`status_kib`'s fields summed over ``pid`` and every process under it (a component's memory, ``VmRSS``,
    and threads, ``Threads``: a local service is its own pid, a container's pid its init whose child is the
    service); {} when it is gone."""
    out: dict[str, int] = {}
    for p in {pid, *descendants(pid)}:
        for key, value in status_kib(p, *keys).items():
            out[key] = out.get(key, 0) + value
    return out


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and every descendant (``VmRSS`` of each, in bytes); 0 if it is gone."""
    return tree_status(pid, "VmRSS").get("VmRSS", 0) * 1024


def smaps_kib(pid: int) -> dict[str, int]:
    """``Rss`` and ``Pss`` (shared pages split between their users) of a process, in KiB; {} if gone."""
    out: dict[str, int] = {}
    try:
        for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
            key = line.split(":", 1)[0]
            if key in ("Rss", "Pss"):
                out[key] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def environ(pid: int) -> list[bytes]:
    """The process's environment as it was at its start (``NAME=value`` each); [] if gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def argv(pid: int) -> list[str] | None:
    """The process's arguments; None if gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def cmdline(pid: int) -> str | None:
    """The process's command line, its arguments joined by spaces; None if gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def meminfo_kib(key: str) -> int | None:
    """A field of /proc/meminfo in KiB (``MemTotal``, ``MemAvailable``); None where unknown."""
    try:
        for line in _read("/proc/meminfo").splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_model() -> tuple[str, int | None]:
    """The first CPU's model name and MHz (/proc/cpuinfo); ("unknown", None) where unknown."""
    model, mhz = "unknown", None
    try:
        for line in _read("/proc/cpuinfo").splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz") and mhz is None:
                mhz = round(float(line.split(":", 1)[1]))
    except (OSError, ValueError):
        pass
    return model, mhz


def machine_cpu_seconds() -> dict[str, float]:
    """Whole-machine CPU time so far, from /proc/stat: busy, idle and steal (time the hypervisor ran someone else
    while this VM wanted the CPU), summed over all CPUs."""
    fields = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return {"busy": (user + nice + system + irq + softirq) / TICK, "idle": (idle + iowait) / TICK, "steal": steal / TICK}


def boot_id() -> str:
    try:
        return _read("/proc/sys/kernel/random/boot_id").strip()
    except OSError:
        return "unknown"


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        return "unknown"


def local_port_range() -> tuple[int, int] | None:
    """The ephemeral port range the kernel hands out (/proc/sys/net/ipv4/ip_local_port_range); None where unknown."""
    try:
        low, high = _read("/proc/sys/net/ipv4/ip_local_port_range").split()
        return int(low), int(high)
    except (OSError, ValueError):
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
SESSION_TAG = Settings.variable("test_session")


def tagged(tag: str, *, workers: bool = False, spared: set[int] = frozenset()) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying ``SESSION_TAG=<tag>`` (with ``workers``: a
    worker's tag under it, ``<tag>/...``), except ``spared``; /proc holds a process's environment as it
    was at its start."""
    if not tag or not os.path.isdir("/proc"):
        return []
    needle = f"{SESSION_TAG}={tag}".encode()
    found = []
    for pid in pids():
        if pid in spared:
            continue
        env = environ(pid)  # gone meanwhile, or not ours to read: empty
        if not any(v.startswith(needle + b"/") if workers else v == needle for v in env):
            continue
        line = cmdline(pid)
        if line is not None and alive(pid):
            found.append((pid, line))
    return found


def tag_of(pid: int) -> str | None:
    """The ``SESSION_TAG`` a process carries (its environment at its start), or None."""
    prefix = f"{SESSION_TAG}=".encode()
    return next((v[len(prefix):].decode(errors="replace") for v in environ(pid) if v.startswith(prefix)), None)


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
