"""How a component runs: as a child process of this host, or in its own container.

:class:`~eppkit.components.jaeger.Jaeger` and :class:`~eppkit.gateway.process.Envoy` are one class each; a
launcher makes the managed process or container they start. Both have the same surface
(:class:`~eppkit.components.base.Component`: start, wait_ready, stop, kill, logs), so readiness and
teardown do not care which one runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, Sequence

from eppkit.components.base import Component
from eppkit.components.process import ManagedProcess


class Launcher(Protocol):
    def make(self, name: str, args: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
             mounts: Sequence[str | os.PathLike] = ()) -> Component:
        """A not-yet-started component running the program with ``args``; ``mounts``: host paths it reads."""
        ...


class ProcessLauncher:
    """The program is a binary on this host (local runtime); host paths need no mounting.
    ``wrapper``: a command it runs under (e.g. ``taskset -c 1`` to pin it)."""

    def __init__(self, binary: str | os.PathLike, *, wrapper: Sequence[str] = ()):
        self.binary = Path(binary)
        self.wrapper = list(wrapper)

    def make(self, name, args, log_path, *, env=None, mounts=()) -> ManagedProcess:
        argv = [*self.wrapper, str(self.binary), *map(str, args)]
        return ManagedProcess(name, argv, log_path).with_env(**(env or {}))


class ContainerLauncher:
    """The program is an image's entrypoint (docker runtime); every host path it reads is mounted
    read-only at the same path, so rendered configs need no rewriting."""

    def __init__(self, image: str, *, entrypoint: Sequence[str] | None = None, labels: dict[str, str] | None = None):
        self.image = image
        self.entrypoint = list(entrypoint) if entrypoint else None
        self.labels = labels or {}

    def make(self, name, args, log_path, *, env=None, mounts=()):
        from eppkit.components.container import ManagedContainer

        container = ManagedContainer(name, self.image, list(map(str, args)), log_path, entrypoint=self.entrypoint,
                                     extra_labels=self.labels).with_env(**(env or {}))
        for path in mounts:
            container.with_mount(path, "ro")
        return container
