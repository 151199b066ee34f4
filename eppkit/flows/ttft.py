"""ttft: as pd, but the pd-sidecar streams prefill's first token to the client at once and drops decode's duplicate.

Prefill and decode get the same seed, so the text is one answer only from servers whose output
follows the request's seed (checked before anything starts for servers given by URL).
"""

from __future__ import annotations

from eppkit.flows import _disaggregated
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex

FLOW = register(Flow(
    name="ttft", summary="as pd; the sidecar streams prefill's first token at once", order=3,
    plan=lambda topology, ports, run_dir, pod_addresses: _disaggregated.plan(topology, ports, run_dir,
                                                                             stream_first_token=True),
    spans=lambda topology, emits, media_items: ex.PD_SIDECAR + ex.backend_pd(emits),
    disaggregated=True,
))
