"""The kit's registries by name, as tests like to write them: render a mode's Envoy config, plan a flow,
list a mode x flow's expected spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eppkit.observability import expected_spans

from eppkit import flows, modes
from eppkit.components.ports import PortAllocator
from eppkit.gateway import config as envoy_config
from eppkit.modes.options import CommonOptions
from eppkit.plan import ModePlan, PoolTarget
from eppkit.topology import Topology


def render(mode: str, variables: dict[str, Any]) -> str:
    """The Envoy bootstrap of ``mode`` with ``variables`` (the client timeouts default to CommonOptions')."""
    return envoy_config.render(modes.get(mode).template, {
        "mode": mode, **envoy_config.client_timeouts(CommonOptions()), **variables})


def plan_flow(topology: Topology, ports: PortAllocator, run_dir: Path) -> flows.FlowPlan:
    """The topology's flow's plan, as its testbed makes it (checked first, pods on their own addresses
    where the mode says so)."""
    setup = modes.check(topology)
    return setup.flow.plan(topology, ports, run_dir, setup.watches_pool)


POOL_TARGET = PoolTarget("/run/bed/kubeconfig", "bed-ns")  # what a testbed hands a mode whose EPP watches a pool


def plan_mode(topology: Topology, backends: list, pools: flows.FlowPlan | None = None) -> ModePlan:
    """The mode's plan as its testbed makes it (a pool to watch, :data:`POOL_TARGET`, where the mode wants one)."""
    mode = modes.get(topology.mode)
    kube = POOL_TARGET if mode.watches_pool(mode.read_options(topology.options)) else None
    return modes.plan(topology, PortAllocator(), backends, pools, kube)


def expected(mode: str, flow: str, media_items: int = 0, backend_spans: str = expected_spans.FULL, **topology):
    """The spans a successful request of ``mode`` x ``flow`` holds (a testbed of that Topology, as its
    ``bed.expected_spans(media_items)`` says)."""
    behind = flows.get(flow).spans(Topology(mode=mode, flow=flow, **topology),
                                   expected_spans.check_backend_spans(backend_spans), media_items)
    return expected_spans.expected(modes.get(mode), behind)


def parse(command: str, *argv: str):
    """``argv`` parsed as the ``eppkit <command>`` command line does (its flags: eppkit.options)."""
    import argparse

    from eppkit import options

    parser = argparse.ArgumentParser(prog=f"eppkit {command}")
    options.add_arguments(parser, command)
    return parser.parse_args(list(argv))


def cli_topology(*argv: str) -> Topology:
    """The Topology ``eppkit run <argv>`` would start."""
    from eppkit import options

    return options.topology(parse("run", *argv))


class PluginConfig:
    """A pytest config as the plugin reads it: the ``--eppkit-*`` options given (by flag), the ini keys given."""

    def __init__(self, options: dict[str, Any] | None = None, ini: dict[str, str] | None = None):
        self.options, self.ini = options or {}, ini or {}

    def getoption(self, name: str):
        return self.options.get(name)

    def getini(self, name: str):
        return self.ini.get(name, "")
