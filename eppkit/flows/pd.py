"""pd: prefill vLLM, then decode vLLM through a pd-sidecar in front of each decoder (vLLM's kv_transfer_params handshake)."""

from __future__ import annotations

from eppkit.flows import _disaggregated
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex

FLOW = register(Flow(
    name="pd", summary="prefill vLLM -> decode vLLM through a pd-sidecar in front of each decoder", order=1,
    plan=lambda topology, ports, run_dir, pod_addresses: _disaggregated.plan(topology, ports, run_dir),
    spans=lambda topology, emits, media_items: ex.PD_SIDECAR + ex.backend_pd(emits),
    disaggregated=True,
))
