"""eppkit's testbed: topology in, running Envoy + pickers + mocks + Jaeger out."""

from __future__ import annotations

from testbed.topology import Endpoint, ModePlan, ServiceSpec, Topology, VllmSpec

RUNTIMES = ("local",)


def create(topology: Topology, runtime: str = "local", **kwargs):
    """A not-yet-started testbed for ``runtime``; use it in a ``with`` or call start()/stop()."""
    if runtime == "local":
        from testbed.local import LocalTestbed

        return LocalTestbed(topology, **kwargs)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


__all__ = ["Endpoint", "ModePlan", "ServiceSpec", "Topology", "VllmSpec", "create", "RUNTIMES"]
