"""eppkit's testbed: topology in, running Envoy + pickers + mocks + Jaeger out."""

from __future__ import annotations

from testbed.topology import Endpoint, ModePlan, ServiceSpec, Topology, VllmSpec

RUNTIMES = ("local", "docker")


def create(topology: Topology, runtime: str = "local", **kwargs):
    """A not-yet-started testbed for ``runtime``; use it in a ``with`` or call start()/stop()."""
    if runtime == "local":
        from testbed.local import LocalTestbed

        return LocalTestbed(topology, **kwargs)
    if runtime == "docker":
        from testbed.docker_runtime import DockerTestbed

        return DockerTestbed(topology, **kwargs)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


def create_jaeger(runtime: str, run_dir, **kwargs):
    """A not-yet-started Jaeger for ``runtime`` (a process, or a container), e.g. one shared by a session."""
    if runtime == "local":
        from testbed.jaeger import JaegerProcess

        return JaegerProcess(run_dir, **kwargs)
    if runtime == "docker":
        from testbed.docker_runtime import JaegerContainer

        return JaegerContainer(run_dir, **kwargs)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


__all__ = ["Endpoint", "ModePlan", "ServiceSpec", "Topology", "VllmSpec", "create", "create_jaeger", "RUNTIMES"]
