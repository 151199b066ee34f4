"""The benchmark's own tools, built once from their Go modules into ~/.cache/eppkit/bin (never committed).

| tool | module @ version | why |
|---|---|---|
| vegeta | github.com/tsenart/vegeta/v12 @ v12.12.0 | fixed-rate open-loop HTTP load generator with per-request latencies; Go, so it is not the bottleneck on 2 cores |
| llm-d-inference-sim | github.com/llm-d/llm-d-inference-sim @ v0.10.2 | the peer mock vLLM the kit's mock is measured against (the kit's backend preset, eppkit.backends.inference_sim) |

The builder is the kit's (:mod:`eppkit.builds.gotools`), so bench and ``--backend llm-d-inference-sim`` share
one cached binary.
"""

from __future__ import annotations

from eppkit.backends.inference_sim import TOOL as INFERENCE_SIM
from eppkit.builds.gotools import BuildFailed, GoTool, build, find

VEGETA = GoTool("vegeta", "github.com/tsenart/vegeta/v12", "v12.12.0", ".")

__all__ = ["BuildFailed", "GoTool", "build", "find", "VEGETA", "INFERENCE_SIM"]
