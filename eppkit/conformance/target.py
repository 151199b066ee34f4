"""The subject under test: an EPP (:class:`Target`: which mode hosts it, how it is started, what it can be asked
to do) or a plugin (:class:`PluginTarget`: your filters, judged against the same testbed without them).

Every EPP the kit can host can be judged: the kit's own (``ext_proc``, ``sidecar``), one of your own
(``external-epp`` with ``epp_command`` or ``epp_address``) and GAIE's (``gaie-epp``). The suite builds
its testbeds from a :class:`Target`: the same mode and options every time, plus what one check needs
(a subset hint, response processing, an unreachable EPP, ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from eppkit import modes
from eppkit import options as options_table
from eppkit.builds import gaie
from eppkit.conformance.subject import EPP, PLUGIN
from eppkit.modes import external_epp, gaie_epp
from eppkit.services.picker import headers
from eppkit.services.vllm.config import MockLatency
from eppkit.topology import Topology, VllmSpec

# The modes whose picker is an EPP behind ext_proc: what the suite judges.
EPP_MODES = ("ext_proc", "sidecar", external_epp.MODE.name, gaie_epp.MODE.name)
PODS = ("vllm-0", "vllm-1", "vllm-2")
# How long a check waits for one request (the pods answer in milliseconds): an EPP that never answers costs that
# (`eppkit conformance --request-timeout`'s default, from the one options table).
REQUEST_TIMEOUT_S: float = options_table.default("request_timeout_s", options_table.CONFORMANCE)
# The pods' latency: a request takes milliseconds, so a check's time is the EPP's and Envoy's.
QUICK = MockLatency(time_to_first_token=2.0, inter_token_latency=1.0)
# What the kit's own EPP answers to shed a request (test steering): the shed check's default for it.
KIT_SHED = f"{headers.SHED}: 1"
# Flow control's declared request TTL by default (the kit's EPP is started with it; llm-d's own default, 60 s, is too
# long to wait out) and the least the checks can judge: they hold requests queued some 3 s while freeing slots.
FLOW_CONTROL_TTL_S, MIN_FLOW_CONTROL_TTL_S = 5.0, 4.0


@dataclass
class Target:
    """The EPP to judge: ``mode`` (one of :data:`EPP_MODES`) and its options (``epp_command`` /
    ``epp_address`` for an EPP of your own). A :class:`~eppkit.conformance.subject.Subject`."""

    mode: str = "ext_proc"
    options: dict[str, Any] = field(default_factory=dict)
    # A request header ("name: value") that makes the EPP shed the request (429); None: the shed check is
    # not applicable (no way to make this EPP shed on demand). The kit's EPP: its x-eppkit-shed header.
    shed_header: str | None = None
    # Options that make this EPP honour GAIE's test header (test-epp-endpoint-selection), for the checks
    # that need a forced pick; GAIE's EPP v1.5.0 does only with its conformance EndpointPickerConfig.
    test_header_options: dict[str, Any] = field(default_factory=dict)
    pods: tuple[str, ...] = PODS
    envoy_version: str | None = None  # the Envoy that judges (None: the one installed with eppkit)
    # The EPP says it routes by where the pods' KV-cache blocks are (it reads their KV events: {kv_events}): the
    # kv-cache-affinity check judges it; otherwise that check is n/a.
    cache_aware: bool = False
    # The EPP says it routes by the pods' load (their /metrics): the load-aware check judges it; otherwise n/a.
    load_aware: bool = False
    # The EPP says it routes LoRA adapters (their pods' /metrics): the lora-affinity check judges it; otherwise n/a.
    lora_affinity: bool = False
    # The EPP says it sheds sheddable requests (InferenceObjective priority < 0) when the pool is saturated: the
    # saturation check judges it; otherwise n/a.
    saturation: bool = False
    # The EPP says it disaggregates prefill and decode as llm-d does (a decode pod as destination, a prefill pod named
    # in x-prefiller-host-port, by the pods' llm-d.ai/role): the pd-disaggregation check judges it; otherwise n/a.
    pd: bool = False
    # The EPP says it queues requests while the pool is saturated (flow control: priority bands, fairness, a TTL): the
    # checks queued-then-served, priority-bands, fairness and ttl-drop judge it; otherwise n/a. Its request TTL (the
    # kit's EPP is started with it) and the status of a TTL drop.
    flow_control: bool = False
    flow_control_ttl: float = FLOW_CONTROL_TTL_S
    flow_control_drop_status: int = 429
    # Your filters in the chain of every testbed (--lua-filter, --dynamic-module, --http-filter): the EPP is judged
    # with them in front of or behind it, as it will run.
    filters: tuple = ()
    kind: ClassVar[str] = EPP  # what the report says was judged (eppkit.conformance.subject.Subject)

    def __post_init__(self) -> None:
        if self.mode not in EPP_MODES:
            raise ValueError(f"eppkit conformance judges an EPP behind ext_proc: --mode {' | '.join(EPP_MODES)} "
                             f"(got {self.mode})")
        if self.shed_header is None and self.mode in ("ext_proc", "sidecar"):
            self.shed_header = KIT_SHED
        if self.mode == gaie_epp.MODE.name and not self.test_header_options:
            self.test_header_options = {"conformance": True}
        if self.flow_control_ttl < MIN_FLOW_CONTROL_TTL_S:
            raise ValueError(f"--flow-control-ttl {self.flow_control_ttl:g}: at least {MIN_FLOW_CONTROL_TTL_S:g} s "
                             "(the checks keep requests queued that long while they free the pod's slots)")
        if not 400 <= self.flow_control_drop_status < 600:
            raise ValueError(f"--flow-control-drop-status {self.flow_control_drop_status}: an HTTP error status")
        if self.shed_header is not None and ":" not in self.shed_header:
            raise ValueError(f"--shed-header {self.shed_header!r}: give 'name: value'")

    def validate(self) -> "Target":
        """ValueError naming a bad mode option now, before any testbed starts (in pytest the plugin may still
        fill in the EPP of an external-epp topology: --eppkit-epp-command)."""
        modes.check(self.topology())
        return self

    @property
    def label(self) -> str:
        """What the report calls the EPP."""
        if self.mode == external_epp.MODE.name:
            if self.options.get("epp_image"):
                return f"{self.options['epp_image']} {self.options.get('epp_command', '')}".strip()
            return self.options.get("epp_command") or f"the EPP at {self.options.get('epp_address')}"
        if self.mode == gaie_epp.MODE.name:
            return f"GAIE EPP {gaie.VERSION} ({self.mode})"
        return f"the kit's EPP ({self.mode})"

    @property
    def kit_started(self) -> bool:
        """The kit starts (and can stop) this EPP: not one given by address."""
        return not self.options.get("epp_address")

    def let_through_headers(self) -> dict[str, str]:
        """None to add: an EPP's requests carry no gate's headers (your filters in front of it are judged with it)."""
        return {}

    def shed(self) -> dict[str, str]:
        name, _, value = (self.shed_header or "").partition(":")
        return {name.strip(): value.strip()}

    def topology(self, **options: Any) -> Topology:
        """The EPP's testbed: three mock pods answering at once (the EPP is judged, not the backend), its mode
        and options, and ``options`` on top."""
        return Topology(mode=self.mode, vllm=[VllmSpec(name=p) for p in self.pods], latency=QUICK,
                        options={**self.options, **options}, envoy_version=self.envoy_version,
                        filters=list(self.filters))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": self.mode, "label": self.label,
                **{k: v for k, v in self.options.items() if v},
                **({"shed_header": self.shed_header} if self.shed_header else {}),
                **({"cache_aware": True} if self.cache_aware else {}),
                **({"load_aware": True} if self.load_aware else {}),
                **({"lora_affinity": True} if self.lora_affinity else {}),
                **({"saturation": True} if self.saturation else {}),
                **({"pd": True} if self.pd else {}),
                **({"flow_control": {"ttl_s": self.flow_control_ttl, "drop_status": self.flow_control_drop_status}}
                   if self.flow_control else {}),
                **({"filters": [f"{f.label} @{f.position}" for f in self.filters]} if self.filters else {})}

    def replace(self, **changes: Any) -> "Target":
        return dataclasses.replace(self, **changes)


REWRITES = ("request", "response")  # the directions a plugin may declare it rewrites (--plugin-rewrites)


@dataclass
class PluginTarget:
    """Your filters judged as the subject (``eppkit conformance --plugin``): each check sends the same requests
    through the testbed with them and through its floor, the same topology without them, in the same run; the
    filters' effect is the difference. A :class:`~eppkit.conformance.subject.Subject`, as :class:`Target` is."""

    filters: tuple = ()
    mode: str = "direct"  # any mode: direct judges the filter alone (no picker in the floor's numbers)
    options: dict[str, Any] = field(default_factory=dict)
    envoy_version: str | None = None
    # The directions the plugin declares it rewrites on purpose: bodies-byte-for-byte does not judge them.
    rewrites: frozenset = frozenset()
    pods: tuple[str, ...] = PODS[:1]  # one pod: the filter is judged, not the pick
    # Headers ("name: value") a gate lets through (--plugin-let-through): every request of the verdict carries them,
    # but refusals-are-clean's, sent without them so that the plugin refuses them.
    let_through: tuple[str, ...] = ()
    test_header_options: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = PLUGIN

    def __post_init__(self) -> None:
        if not self.filters:
            raise ValueError("--plugin judges your filter: give --lua-filter, --dynamic-module or --http-filter")
        self.filters = tuple(self.filters)
        self.rewrites = frozenset(self.rewrites)
        unknown = sorted(self.rewrites - set(REWRITES))
        if unknown:
            raise ValueError(f"--plugin-rewrites {', '.join(unknown)}: choose {' | '.join(REWRITES)}")
        self.let_through = tuple(self.let_through)
        bad = [h for h in self.let_through if not h.partition(":")[0].strip() or ":" not in h]
        if bad:
            raise ValueError(f"--plugin-let-through {bad[0]!r}: give 'name: value'")

    def let_through_headers(self) -> dict[str, str]:
        """The headers every request of the verdict carries so that the plugin lets it through."""
        return {name.strip().lower(): value.strip()
                for name, _, value in (h.partition(":") for h in self.let_through)}

    def validate(self) -> PluginTarget:
        """ValueError naming a bad mode or mode option now, before any testbed starts."""
        modes.check(self.topology())
        return self

    @property
    def label(self) -> str:
        return ", ".join(f"{f.label} @{f.position}" for f in self.filters)

    @property
    def floor_label(self) -> str:
        return f"the same {self.mode} testbed without the plugin's filters (same Envoy, same pods)"

    def has_lua(self) -> bool:
        from eppkit.gateway.user_filters import LuaFilter

        return any(isinstance(f, LuaFilter) for f in self.filters)

    def topology(self, *, floor: bool = False, **options: Any) -> Topology:
        """The plugin's testbed (one pod, quick, the mode and options, the filters), or with ``floor`` the same
        without the filters."""
        return Topology(mode=self.mode, vllm=[VllmSpec(name=p) for p in self.pods], latency=QUICK,
                        options={**self.options, **options}, envoy_version=self.envoy_version,
                        filters=[] if floor else list(self.filters))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": self.mode, "label": self.label,
                "filters": [f"{f.label} @{f.position}" for f in self.filters], "floor": self.floor_label,
                **{k: v for k, v in self.options.items() if v},
                **({"rewrites": sorted(self.rewrites)} if self.rewrites else {}),
                **({"let_through": list(self.let_through)} if self.let_through else {})}

    def replace(self, **changes: Any) -> PluginTarget:
        return dataclasses.replace(self, **changes)
