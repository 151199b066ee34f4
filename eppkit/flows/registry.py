"""The flow registry: one :class:`Flow` per module of :mod:`eppkit.flows`, each registered once.

A flow says what happens behind the picker: which servers it starts and which of them Envoy routes
to (``plan``), which spans a successful request of it adds to a trace (``spans``), and what it
needs of the mode and the backend. Everything else asks this registry; nothing switches on a
flow's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TYPE_CHECKING, Callable

from eppkit.components.ports import PortAllocator
from eppkit.core.registry import Registry
from eppkit.plan import Endpoint, ServiceSpec
from eppkit.topology import Topology

if TYPE_CHECKING:
    from eppkit.observability.expected_spans import SpanRule


@dataclass
class FlowPlan:
    """The servers a flow starts, in start order, and what the pickers choose from."""

    services: list[ServiceSpec] = field(default_factory=list)
    routable: list[Endpoint] = field(default_factory=list)  # what pickers choose from / Envoy routes to
    prefill: list[Endpoint] = field(default_factory=list)
    encoders: list[Endpoint] = field(default_factory=list)
    # The service serving each endpoint when it is not the endpoint's own (Topology.pods_per_mock > 1).
    servers: dict[str, str] = field(default_factory=dict)


# (topology, ports, run folder, pod_addresses) -> the plan; pod_addresses: each vLLM a pod on an address of its own
# on one shared port (the mode's EPP watches an InferencePool: eppkit.modes.Mode.watches_pool): False, or where the
# runtime puts pods (eppkit.components.inference_pool.LoopbackPods, eppkit.cluster.podnet.BlockPods).
Plan = Callable[[Topology, PortAllocator, Path, Any], FlowPlan]
# (the topology, what its backend emits: eppkit.observability.expected_spans.BACKEND_SPANS, media items in the
# request) -> the spans a successful request of this flow adds behind Envoy's upstream span.
Spans = Callable[[Topology, str, int], "tuple[SpanRule, ...]"]


@dataclass(frozen=True)
class Flow:
    name: str
    summary: str  # one line: what runs
    order: int  # position in listings
    plan: Plan
    spans: Spans
    # Only these modes can run it, and why (empty: every mode whose Mode.flows allows it).
    modes: tuple[str, ...] = ()
    modes_why: str = ""
    # Why it needs the kit's mock vLLM as backend ("": any OpenAI-compatible server will do).
    mock_only: str = ""
    # Why it needs a mode in which someone picks (Mode.pickers): its pool holds pods that must never be a destination
    # ("": a mode where nobody picks, Envoy's round robin, will do).
    needs_picker: str = ""
    # Separate prefill and decode servers (backends given by URL: --prefill-url / --decode-url).
    disaggregated: bool = False


FLOWS: Registry[Flow] = Registry("flow")
register, names, get, all_flows = FLOWS.register, FLOWS.names, FLOWS.get, FLOWS.all
