"""Who owns a container or a Pod of the kit: its labels (the kit's, this session's, its owner process's) and whether
that owner is still alive, read by the sweeps of both (:mod:`eppkit.components.container`,
:mod:`eppkit.cluster.namespaces`)."""

from __future__ import annotations

import os
import socket
import uuid

from eppkit.core import procfs
from eppkit.core.settings import settings

LABEL = "eppkit"
TEST_SESSION_LABEL = f"{LABEL}.test-session"
SESSION = uuid.uuid4().hex[:12]


def owner_id(pid: int | None = None) -> str:
    """``<host>/<boot id>/<pid namespace>/<pid>/<start time>``: one process, never a later one reusing its pid."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{procfs.boot_id()}/{procfs.pid_namespace()}/{pid}/{procfs.start_ticks(pid)}"


def owner_alive(owner: str) -> bool:
    """False only when we can tell the owner is gone; an owner we cannot see counts as alive.

    Another host (a shared remote engine) or another pid namespace (CI jobs in containers
    sharing the engine) cannot be checked from here: their containers are theirs to clean.
    """
    try:
        host, boot, pidns, pid, started = owner.split("/")
    except ValueError:
        return False  # not one of ours, or from an older kit: nobody can clean it but a sweep
    if host != socket.gethostname():
        return True
    if boot != procfs.boot_id():
        return False  # this host rebooted since: the owner is long gone
    if pidns != procfs.pid_namespace():
        return True
    return bool(started) and procfs.start_ticks(int(pid)) == started


def labels(component: str, **extra: str) -> dict[str, str]:
    """``eppkit.test-session``: the test session's tag (:data:`eppkit.core.procfs.SESSION_TAG`; under
    pytest-xdist it names the worker), so the run's end finds what any worker left."""
    tag = settings().test_session
    return {LABEL: "1", f"{LABEL}.session": SESSION, f"{LABEL}.owner": owner_id(),
            f"{LABEL}.owner-pid": str(os.getpid()), f"{LABEL}.component": component,
            **({TEST_SESSION_LABEL: tag} if tag else {}), **extra}
