"""Where the kit's files live: its package data, the per-user cache, and the run and report folders.

Package data (Envoy templates, Lua filters, the dynamic module's Go sources, Jaeger's config
template, dockerfiles) is read through :mod:`importlib.resources`, so it is found the same way
in a wheel install and in an editable one. Nothing is ever written next to the package: runs and
reports go under the current directory (or ``$EPPKIT_RUNS`` / ``$EPPKIT_REPORTS``, read as every setting is:
:mod:`eppkit.core.settings`), built artifacts into the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from eppkit.core.settings import settings


def package_data(name: str) -> Path:
    """A data folder of the kit: ``envoy``, ``plugins`` (folders beside ``eppkit/`` in a checkout, inside
    the package in a wheel) or ``runtimes/dockerfiles`` (inside ``eppkit/`` in both).

    setuptools' editable finder maps ``eppkit.envoy`` to the checkout's ``envoy/`` folder only for
    Python modules, so in an editable install the data folders are found beside the package.
    """
    package = Path(str(files("eppkit")))
    for candidate in (package / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"eppkit's data folder {name!r} is missing from {package}: reinstall eppkit")


ENVOY_TEMPLATES = package_data("envoy")
PLUGINS = package_data("plugins")
DOCKERFILES = package_data("runtimes/dockerfiles")


def cache_dir() -> Path:
    """Built artifacts (Jaeger binary, dynamic modules, Envoy versions) live here and are reused."""
    path = settings().cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes: two sessions filling the same cache entry
    (a build, an install) do it once; the second waits, then finds it done."""
    with Path(path).open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def port_leases_dir() -> Path:
    """Machine-wide: one lock file per port an eppkit process holds (:mod:`eppkit.components.ports`).

    ``$EPPKIT_PORT_LEASES``, else ``<tmp>/eppkit-ports``, world-writable with the sticky bit like /tmp
    itself, since ports are one namespace for every user of the machine.
    """
    path = settings().port_leases_dir()
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # someone else's folder: theirs to set
            path.chmod(0o1777)
    return path


def runs_dir() -> Path:
    """Each testbed start gets a folder here holding its rendered configs and logs: ``./runs``."""
    path = settings().runs_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_run_dir(label: str) -> Path:
    """``<runs>/<time>-<label>``; in a pytest-xdist worker ``<runs>/<time>-<worker id>-<label>`` (xdist sets
    PYTEST_XDIST_WORKER in each worker, and what the worker starts inherits it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    label = f"{worker}-{label}" if worker else label
    base = runs_dir()
    for i in range(1000):
        path = base / f"{stamp}-{label}" if i == 0 else base / f"{stamp}-{label}-{i}"
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run folder under {base}")


def reports_dir() -> Path:
    """``eppkit compare`` writes its reports here: ``./reports``."""
    path = settings().reports_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path
