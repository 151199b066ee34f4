"""Integration modes: one registry entry per mode says everything the kit knows about it.

Each module of this package defines one mode: its typed options (a dataclass), its ``plan`` (the
services it starts and the variables of its Envoy template) and a :class:`Mode` entry passed to
:func:`register`. Every module is imported with the package, so a new mode is one module plus
its Envoy template (envoy/<template>). Everything else asks the registry:

- the testbed starts ``plan``'s services and renders ``template`` (eppkit/runtimes/testbed.py);
- the CLI and ``eppkit compare`` list :func:`names` and read options through :func:`options_for`;
- the report colours a mode with ``color``; the reliability tests read the traits below;
- which spans a complete trace holds: ``spans`` (the mode's own; the flow's come from
  eppkit.observability.expected_spans).

``plan(topology, options, ports, backends, pools)``: ``backends`` are what Envoy routes to (the
decoders' pd-sidecars in disaggregated flows); ``pools`` is the flow's layout
(:class:`eppkit.flows.FlowPlan`), whose ``prefill`` and ``encoders`` the picker modes hand to their
picker so it names those stages too.
"""

from __future__ import annotations

from eppkit.core.registry import load_members
from eppkit.modes.registry import Mode, Setup, all_modes, check, get, kit_names, names, options_for, plan, register

__all__ = ["Mode", "Setup", "all_modes", "check", "get", "kit_names", "names", "options_for", "plan", "register"]


load_members(__name__, __path__, group="modes", skip=("options", "registry"))
