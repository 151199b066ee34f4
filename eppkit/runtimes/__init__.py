"""The two runtimes, local (processes) and docker (containers): one topology in, the same handles out."""

from __future__ import annotations

from eppkit.topology import Topology

RUNTIMES = ("local", "docker")


def create(topology: Topology, runtime: str = "local", **kwargs):
    """A not-yet-started testbed for ``runtime``; use it in a ``with`` or call start()/stop()."""
    if runtime == "local":
        from eppkit.runtimes.local import LocalTestbed

        return LocalTestbed(topology, **kwargs)
    if runtime == "docker":
        from eppkit.runtimes.docker import DockerTestbed

        return DockerTestbed(topology, **kwargs)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


def create_jaeger(runtime: str, run_dir, **kwargs):
    """A not-yet-started Jaeger for ``runtime`` (a process, or a container), e.g. one shared by a session."""
    if runtime == "local":
        from eppkit.components.jaeger import Jaeger

        return Jaeger(run_dir, **kwargs)
    if runtime == "docker":
        from eppkit.runtimes.docker import jaeger_container

        return jaeger_container(run_dir, **kwargs)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


