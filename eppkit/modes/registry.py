"""The mode registry: one :class:`Mode` per module of :mod:`eppkit.modes`, each registered once."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable

from eppkit.components.ports import PortAllocator
from eppkit.core.registry import Registry
from eppkit.flows import Flow, FlowPlan
from eppkit.flows import get as get_flow
from eppkit.modes.options import read_options
from eppkit.plan import Endpoint, ModePlan, PoolTarget
from eppkit.topology import Topology

# (topology, its options, ports, the backends, the flow's plan, the pool its EPP watches or None) -> the plan
Plan = Callable[[Topology, Any, PortAllocator, list[Endpoint], "FlowPlan | None", "PoolTarget | None"], ModePlan]


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str  # one line: who decides, over what
    order: int  # position in listings; eppkit compare runs the modes in this order
    template: str  # the Envoy bootstrap template, envoy/<template>
    options: type  # the dataclass of its options (eppkit.modes.options)
    plan: Plan
    color: str  # its colour in the report's charts
    # Traits (what the reliability tests and the report read):
    pickers: tuple[str, ...] = ()  # services that take part in the decision, the one Envoy calls first
    picker_span: str | None = None  # the server span of the service Envoy calls (its HTTP status, errors)
    picker_call: str | None = None  # Envoy's span of the call to the picker
    decision: tuple[str, str] | None = None  # (service, span) of the component that makes the decision
    spans: tuple[tuple[str, str], ...] = ()  # (service, span) every successful request of this mode adds
    upstream: str = "router pool egress"  # Envoy's upstream span when the picker chose the endpoint
    fallback_upstream: str = "router pool egress"  # Envoy's upstream span when nobody chose (fail-open, GET)
    health_aware: bool = False  # the picker scrapes /metrics and leaves dead endpoints out
    flows: tuple[str, ...] | None = None  # the only flows it can run (None: every flow that does not name its modes)
    flows_why: str = ""
    # The picker is not one of the kit's services (an EPP of your own, an upstream EPP): its spans,
    # errors and steering headers are its own, so the checks of the kit's pickers do not apply.
    external: bool = False
    # Its EPP is a Kubernetes controller: it watches an InferencePool and its Pods in the testbed's control plane
    # (eppkit.components.controlplane). The mocks are then that pool's pods, each on its own loopback address
    # (127.0.0.2, 127.0.0.3, ...), all on the pool's one target port. A function of the mode's options when only
    # some of its setups watch a pool (external-epp: a command that uses {kubeconfig}).
    kubernetes: bool | Callable[[Any], bool] = False
    # The service name under which the picker exports each request's spans as a trace of its own (an
    # upstream EPP that reads no trace context): found by the request's time, see JaegerClient.spans_between.
    own_trace_service: str = ""

    @property
    def picker(self) -> str | None:
        """The service Envoy talks to (EPP or callout)."""
        return self.pickers[0] if self.pickers else None

    @property
    def option_names(self) -> frozenset[str]:
        """The names of the options it takes (its options dataclass's fields)."""
        return frozenset(f.name for f in fields(self.options))

    def watches_pool(self, options: Any) -> bool:
        """Whether this mode, with these options (its dataclass), runs an EPP that watches an InferencePool."""
        return bool(self.kubernetes(options) if callable(self.kubernetes) else self.kubernetes)

    def specialized(self, options: Any) -> "Mode":
        """This mode as a testbed with ``options`` runs it: an EPP of your own that names its decision span
        (option ``decision_span``, "service:name") has that span as its decision, and every request has it; a callout
        service of yours (``callout_command``) is expected to emit no span."""
        mode = self
        if getattr(options, "callout_command", ""):  # a callout service of yours: its spans are its own business
            mode = replace(self, spans=tuple(s for s in self.spans if s[0] not in self.pickers), decision=None,
                           picker_span=None)
        span = getattr(options, "decision_span", "")
        if not span:
            return mode
        service, _, name = span.partition(":")
        decision = (service.strip(), name.strip())
        return replace(mode, decision=decision, spans=mode.spans + (decision,))

    def read_options(self, raw: dict[str, Any]) -> Any:
        """``raw`` (Topology.options) as this mode's options; ValueError naming what is wrong."""
        options = read_options(self.options, raw, self.name)
        validate = getattr(options, "validate", None)
        if validate is not None:
            try:
                validate()
            except ValueError as exc:
                raise ValueError(f"mode {self.name}: {exc}") from None
        return options


MODES: Registry[Mode] = Registry("mode")
register, names, get, all_modes = MODES.register, MODES.names, MODES.get, MODES.all


def kit_names() -> tuple[str, ...]:
    """The modes whose pickers are the kit's own (what ``all`` means in listings and comparisons)."""
    return tuple(m.name for m in all_modes() if not m.external)


def options_for(topology: Topology) -> Any:
    """The topology's options read into its mode's dataclass (ValueError on an unknown mode or option)."""
    return get(topology.mode).read_options(topology.options)


@dataclass(frozen=True)
class Setup:
    """A topology checked and read once (:func:`check`), handed down to what runs it: its mode (as these options
    run it: :meth:`Mode.specialized`), its flow and the mode's options (its dataclass)."""

    topology: Topology
    mode: Mode
    flow: Flow
    options: Any

    @property
    def watches_pool(self) -> bool:
        """Its EPP watches an InferencePool."""
        return self.mode.watches_pool(self.options)


def check(topology: Topology) -> Setup:
    """The topology's mode, flow and options, read once; ValueError naming the problem when the mode, the flow (in
    this mode, with this backend) or one of the mode's options cannot be used."""
    mode, flow = get(topology.mode), get_flow(topology.flow)
    if flow.modes and mode.name not in flow.modes:
        raise ValueError(f"--flow {flow.name} needs --mode {' or '.join(flow.modes)} (got --mode {mode.name}): "
                         f"{flow.modes_why}")
    if flow.needs_picker and not mode.pickers:
        raise ValueError(f"--flow {flow.name} needs a mode in which an EPP or callout picks (got --mode {mode.name}, "
                         f"where nobody picks): {flow.needs_picker}")
    if mode.flows is not None and flow.name not in mode.flows:
        raise ValueError(f"mode {mode.name} runs the {' and '.join(mode.flows)} flow(s) (got --flow {flow.name})"
                         + (f": {mode.flows_why}" if mode.flows_why else ""))
    options = mode.read_options(topology.options)
    topology.backend.validate(flow, mode.watches_pool(options))
    return Setup(topology, mode.specialized(options), flow, options)


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools: "FlowPlan | None" = None,
         kube: PoolTarget | None = None) -> ModePlan:
    mode = get(topology.mode)
    return mode.plan(topology, mode.read_options(topology.options), ports, backends, pools, kube)
