"""The kit's mock vLLM (eppkit.services.vllm) as a backend: the default, traced in full, and the only one every
flow can use (the epd flow's encoder cache, the mock's x-mock-* steering)."""

from __future__ import annotations

from eppkit.backends.registry import BackendKind, Server, register
from eppkit.observability.expected_spans import FULL
from eppkit.plan import ServiceSpec

NAME = "mock"


def server(s: Server) -> ServiceSpec:
    args = ["--role", s.role, "--instance", s.name, "--served-model-name", s.model, *s.latency.args(),
            "--seed", str(s.seed), *s.extra]
    return ServiceSpec(s.name, "eppkit.services.vllm", s.port, args, host=s.host)


KIND = register(BackendKind(NAME, 0, "its traced mock vLLM", FULL, lambda _: "the kit's mock vLLM", server=server))
