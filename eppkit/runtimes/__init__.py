"""The runtimes: how a testbed's components run. Each is one module with a ``launcher()`` that makes its
:class:`~eppkit.runtimes.launching.Launcher`: the kit's are modules of this package (``local``, ``docker``); an
outside package adds one as an entry point of the group ``eppkit.runtimes`` (its name: the module). The
:class:`~eppkit.runtimes.testbed.Testbed` is one, handed the launcher. One topology in, the same handles out on every
runtime. A runtime's module is imported when a testbed first needs it."""

from __future__ import annotations

import importlib
from importlib import metadata

from eppkit.topology import Topology

KIT_RUNTIMES = ("local", "docker", "kubernetes")
# What "all" means (--eppkit-runtime all): the runtimes every machine with Docker has. The kubernetes runtime needs
# its one-node cluster (`eppkit cluster up`): named, never implied.
ALL_EXCLUDES = ("kubernetes",)


def _outside() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group="eppkit.runtimes") if ep.name not in KIT_RUNTIMES}


RUNTIMES = KIT_RUNTIMES + tuple(_outside())  # every runtime: the kit's first
ALL_RUNTIMES = tuple(r for r in RUNTIMES if r not in ALL_EXCLUDES)


def launcher(runtime: str, **options):
    """The launcher of ``runtime`` (``options``: its own, e.g. docker's ``image_set``)."""
    outside = {} if runtime in KIT_RUNTIMES else _outside()  # the installed distributions, read once
    if runtime in KIT_RUNTIMES:
        module = importlib.import_module(f"{__name__}.{runtime}")
    elif runtime in outside:
        module = outside[runtime].load()
    else:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    return module.launcher(**options)


def create(topology: Topology, runtime: str = "local", *, launcher_options: dict | None = None, **kwargs):
    """A not-yet-started testbed for ``runtime``; use it in a ``with`` or call start()/stop().
    ``kwargs``: the :class:`~eppkit.runtimes.testbed.Testbed`'s (a shared ``jaeger``, ``run_dir``, ...)."""
    from eppkit.runtimes.testbed import Testbed

    return Testbed(topology, launcher(runtime, **(launcher_options or {})), **kwargs)


def create_jaeger(runtime: str, run_dir, **kwargs):
    """A not-yet-started Jaeger for ``runtime`` (a process, or a container), e.g. one shared by a session."""
    return launcher(runtime).jaeger(run_dir, **kwargs)
