"""The runtimes: how a testbed's components run. Each is one module of this package with a ``launcher()`` that
makes its :class:`~eppkit.runtimes.testbed.Launcher`; the :class:`~eppkit.runtimes.testbed.Testbed` is one, handed
the launcher. One topology in, the same handles out on every runtime."""

from __future__ import annotations

import importlib

from eppkit.topology import Topology

RUNTIMES = ("local", "docker")


def launcher(runtime: str, **options):
    """The launcher of ``runtime`` (``options``: its own, e.g. docker's ``image_set``)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    return importlib.import_module(f"{__name__}.{runtime}").launcher(**options)


def create(topology: Topology, runtime: str = "local", *, launcher_options: dict | None = None, **kwargs):
    """A not-yet-started testbed for ``runtime``; use it in a ``with`` or call start()/stop().
    ``kwargs``: the :class:`~eppkit.runtimes.testbed.Testbed`'s (a shared ``jaeger``, ``run_dir``, ...)."""
    from eppkit.runtimes.testbed import Testbed

    return Testbed(topology, launcher(runtime, **(launcher_options or {})), **kwargs)


def create_jaeger(runtime: str, run_dir, **kwargs):
    """A not-yet-started Jaeger for ``runtime`` (a process, or a container), e.g. one shared by a session."""
    return launcher(runtime).jaeger(run_dir, **kwargs)
