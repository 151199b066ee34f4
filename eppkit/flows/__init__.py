"""Flows: what happens behind the picker. One module per flow registers a :class:`Flow`.

| flow        | processes                                                             | Envoy routes to |
|-------------|-----------------------------------------------------------------------|-----------------|
| aggregated  | the topology's vLLMs (role both)                                      | the vLLMs       |
| pd          | prefill vLLMs, decode vLLMs, one pd-sidecar in front of each decoder  | the sidecars    |
| epd         | as pd, plus encoders sharing an encoder-cache dir with P (or PD)      | the sidecars    |
| ttft        | as pd, sidecars stream prefill's first token                          | the sidecars    |
| multipart   | the topology's vLLMs; the mock takes a multipart/mixed body (no flag)   | the vLLMs       |
| pd-pool     | as pd; prefill and decode pods in one pool, labelled llm-d.ai/role    | both roles      |

A new flow is one module here (its ``plan``, its expected ``spans``, what it needs of the mode and
the backend) plus its tests; the CLI's ``--flow`` choices, the checks and the runtimes read the
registry. The vLLMs are the topology's backend (eppkit.backends): the kit's mocks,
llm-d-inference-sim started in their places, or servers you run given by URL (the kit then
starts only the pd-sidecars).
"""

from __future__ import annotations

from eppkit.core.registry import load_members
from eppkit.flows.registry import Flow, FlowPlan, all_flows, get, names, register

__all__ = ["Flow", "FlowPlan", "all_flows", "get", "names", "register"]


load_members(__name__, __path__, group="flows", skip=("registry",))
