"""The EPP under test: which mode hosts it, how it is started, what it can be asked to do.

Every EPP the kit can host can be judged: the kit's own (``ext_proc``, ``sidecar``), one of your own
(``external-epp`` with ``epp_command`` or ``epp_address``) and GAIE's (``gaie-epp``). The suite builds
its testbeds from a :class:`Target`: the same mode and options every time, plus what one check needs
(a subset hint, response processing, an unreachable EPP, ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from eppkit import modes
from eppkit import options as options_table
from eppkit.builds import gaie
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


@dataclass
class Target:
    """The EPP to judge: ``mode`` (one of :data:`EPP_MODES`) and its options (``epp_command`` /
    ``epp_address`` for an EPP of your own)."""

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
    # Your filters in the chain of every testbed (--lua-filter, --dynamic-module, --http-filter): the EPP is judged
    # with them in front of or behind it, as it will run.
    filters: tuple = ()

    def __post_init__(self) -> None:
        if self.mode not in EPP_MODES:
            raise ValueError(f"eppkit conformance judges an EPP behind ext_proc: --mode {' | '.join(EPP_MODES)} "
                             f"(got {self.mode})")
        if self.shed_header is None and self.mode in ("ext_proc", "sidecar"):
            self.shed_header = KIT_SHED
        if self.mode == gaie_epp.MODE.name and not self.test_header_options:
            self.test_header_options = {"conformance": True}
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
        return {"mode": self.mode, "label": self.label, **{k: v for k, v in self.options.items() if v},
                **({"shed_header": self.shed_header} if self.shed_header else {}),
                **({"cache_aware": True} if self.cache_aware else {}),
                **({"filters": [f"{f.label} @{f.position}" for f in self.filters]} if self.filters else {})}

    def replace(self, **changes: Any) -> "Target":
        return dataclasses.replace(self, **changes)
