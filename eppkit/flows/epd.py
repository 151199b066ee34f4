"""epd: encoders first (one request per media item), then prefill, then decode; ``--prefill 0`` gives E+PD
(the decoder prefills itself).

The encoders hand their output to the prefiller through the mock's encoder cache (a folder they
share), so this flow needs the kit's mock vLLM.
"""

from __future__ import annotations

from eppkit.flows import _disaggregated
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex
from eppkit.observability.contract import Encoder, Pd
from eppkit.topology import Topology


def spans(topology: Topology, emits: str, media_items: int) -> tuple[ex.SpanRule, ...]:
    """P/D behind the pd-sidecar, or with ``--prefill 0`` (E+PD) one vLLM that prefills and decodes."""
    encode = (ex.SpanRule.of(Pd.ENCODE, count=media_items), ex.SpanRule.of(Encoder.ENCODE, count=media_items))
    if topology.prefill == 0:
        behind = ex.rules((Pd.REQUEST, Pd.DECODE)) + ex.backend_one(emits)
    else:
        behind = ex.PD_SIDECAR + ex.backend_pd(emits)
    return behind + (encode if media_items else ())


FLOW = register(Flow(
    name="epd", summary="encoders (one request per media item), then prefill, then decode", order=2,
    plan=lambda topology, ports, run_dir, pod_addresses: _disaggregated.plan(topology, ports, run_dir, encoders=True),
    spans=spans, disaggregated=True,
    mock_only="the encoders hand their output to the prefiller through the mock's encoder cache",
))
