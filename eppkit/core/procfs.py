"""Processes as Linux's /proc shows them: is one alive, which are a process's children.

A zombie (exited, not yet reaped) counts as gone: it runs nothing and holds no port.
"""

from __future__ import annotations

import os


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


def children(pid: int) -> set[int]:
    """Every live process whose parent is ``pid``."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry))
    return out


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
