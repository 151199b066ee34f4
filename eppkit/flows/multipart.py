"""multipart: the two-phase request. The EPP sends part 1 and holds the request open; the backend prefills and
answers headers + first token; the EPP injects part 2 (``metadata``) and closes; the backend decodes.

The mock vLLM switches to its two-phase reading on a multipart/mixed content type, so this flow starts
the same vLLMs as aggregated. Only the EPP can send part 1, hold the request open and inject part 2
after the response headers (docs/flows.md, docs/dynmod-multipart.md).
"""

from __future__ import annotations

from eppkit.flows._servers import pool
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex
from eppkit.observability.contract import Vllm
from eppkit.topology import Topology


def spans(topology: Topology, emits: str, media_items: int) -> tuple[ex.SpanRule, ...]:
    return ex.backend_one(emits) + ((ex.SpanRule.of(Vllm.AWAIT_METADATA),) if emits == ex.FULL else ())


FLOW = register(Flow(
    name="multipart", summary="the two-phase request: part 1, the response's first token, then part 2", order=4,
    plan=lambda topology, ports, run_dir, pod_addresses: pool(topology, ports, pod_addresses),
    spans=spans, modes=("ext_proc",),
    modes_why="the picker must send part 1, hold the request open and inject part 2 after the response "
              "headers; only the EPP (ext_proc) can (docs/flows.md, docs/dynmod-multipart.md)",
    mock_only="the mock reads the two-part multipart/mixed body",
))
