"""pd-pool: pd as llm-d deploys it: prefill pods and decode pods in one pool, each labelled ``llm-d.ai/role``.

The pool Envoy routes to (and every EPP sees) holds the prefill vLLMs themselves (role ``prefill``) and the decode
pods, each a pd-sidecar in front of its decode vLLM (role ``decode``). The EPP must pick a decode pod as the
destination and name a prefill pod in ``x-prefiller-host-port``; the sidecar prefills there (its allowlist: the
prefill pods). A pick of a prefill pod is served by that prefill vLLM alone: what the conformance check
``pd-disaggregation`` catches.
"""

from __future__ import annotations

from eppkit.flows import _disaggregated
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex


def plan(topology, ports, run_dir, pod_addresses):
    out = _disaggregated.plan(topology, ports, run_dir)
    out.routable = [*out.prefill, *out.routable]  # one pool of both roles (their Endpoint.role: the label)
    return out


FLOW = register(Flow(
    name="pd-pool", summary="as pd, the prefill and decode pods in one pool labelled llm-d.ai/role (llm-d's layout)",
    order=5, plan=plan, spans=lambda topology, emits, media_items: ex.PD_SIDECAR + ex.backend_pd(emits),
    disaggregated=True,
    needs_picker="Envoy's round robin would send requests to the prefill pods, which only prefill",
))
