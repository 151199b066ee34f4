"""What the two callout modes (lua-callout, dynmod-callout) share: options and the callout service."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from eppkit.modes._pickers import picker_service
from eppkit.modes.options import PickerOptions
from eppkit.observability.contract import Callout, Cluster, Envoy, Service
from eppkit.plan import Endpoint, ServiceSpec
from eppkit.services.picker import headers


@dataclass
class CalloutOptions(PickerOptions):
    callout_timeout_ms: int = 1000  # the filter's wait for /pick; slower counts as down
    pick_latency_ms: float = 0.0  # time each pick takes on purpose (decision cost in comparisons)
    pick_latency_jitter_ms: float = 0.0  # uniform jitter around it, at most 30% of it
    # A callout service of yours in the kit's place: its command line, with {port} (where the filter calls it:
    # POST /pick, GET /health) and {endpoints} (the pool, host:port,...). compare's floor is one (eppkit/floors).
    callout_command: str = ""


def callout_service(options: CalloutOptions, port: int, backends: list[Endpoint], pools) -> ServiceSpec:
    """The callout routing service both callout modes ask (``services.callout``, or ``callout_command``)."""
    if options.callout_command:
        argv = shlex.split(options.callout_command.format(
            port=port, endpoints=",".join(ep.address for ep in backends)))
        return ServiceSpec(name="callout", module="", port=port, argv=argv, health_path="/health", on_host=True)
    extra: list[str] = []
    if options.pick_latency_ms:
        extra += ["--pick-latency", f"{options.pick_latency_ms:g}"]
    if options.pick_latency_jitter_ms:
        extra += ["--pick-latency-jitter", f"{options.pick_latency_jitter_ms:g}"]
    return picker_service("callout", "eppkit.services.callout", port, options, backends, pools, extra=extra)


def callout_names() -> dict[str, object]:
    """The GAIE protocol's names both callout filters use (their config keys): where the pick goes
    (the header and the envoy.lb metadata key), and the client headers forwarded to the callout."""
    return {"destination_header": headers.DESTINATION, "lb_metadata": headers.LB_METADATA,
            "forward_headers": [headers.TEST_ENDPOINT_SELECTION]}


# Traits both callout modes share (the Mode entries add their template and Envoy's call span).
TRAITS = dict(
    pickers=(Service.CALLOUT,), picker_span=Callout.PICK, decision=(Service.CALLOUT, Callout.PICK),
    upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL), health_aware=True,
)
