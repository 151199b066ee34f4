"""direct: Envoy routes straight to the pool; nobody picks. The overhead baseline."""

from __future__ import annotations

from eppkit.gateway.body_routing import body_routing_vars
from eppkit.modes.options import CommonOptions
from eppkit.modes.registry import Mode, register
from eppkit.plan import ModePlan


def plan(topology, options: CommonOptions, ports, backends, pools=None, kube=None) -> ModePlan:
    # Nobody picks: the pd-sidecars fall back to their own prefill/encoder round robin.
    return ModePlan(services=[], envoy_vars=body_routing_vars(options.body_routing, backends))


MODE = register(Mode(
    name="direct", summary="Envoy routes round-robin over the pool; nobody picks (the baseline)", order=0,
    template="direct.yaml.j2", options=CommonOptions, plan=plan, color="#7f7f7f",
))
