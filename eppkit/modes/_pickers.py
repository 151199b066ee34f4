"""What the picker modes share: the picker service's start spec, built from the mode's options.

Every picker service (EPP, frontend, callout) gets its pool and scoring flags from
:func:`eppkit.services.picker.settings.service_args`, so the options mean the same in every mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.plan import Endpoint, ServiceSpec
from eppkit.services.picker.settings import service_args

if TYPE_CHECKING:
    from eppkit.flows import FlowPlan
    from eppkit.modes.options import PickerOptions


def picked_vars(fallbacks: int) -> dict[str, int]:
    """Variables of envoy/_picked.j2: a retry per fallback the picker may name, so Envoy walks the list."""
    return {"picked_retries": fallbacks}


def picker_service(name: str, module: str, port: int, options: "PickerOptions", backends: list[Endpoint],
                   pools: "FlowPlan | None", *, stages: bool = True, extra: list[str] = (),
                   health_path: str | None = "/health") -> ServiceSpec:
    """A picker service over ``backends`` (each with its model when body routing is on), and in
    pd / epd / ttft the flow's prefillers and encoders (``stages``), plus ``extra`` flags."""
    prefill = list(pools.prefill) if stages and pools is not None else []
    encoders = list(pools.encoders) if stages and pools is not None else []
    args = service_args(options, backends, models=options.body_routing, prefill=prefill, encoders=encoders)
    return ServiceSpec(name=name, module=module, port=port, args=[*args, *map(str, extra)], health_path=health_path)
