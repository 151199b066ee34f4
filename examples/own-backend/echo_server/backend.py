"""The server as an eppkit backend: one registry entry (eppkit/backends/registry.py), found through this package's
entry point. The kit starts one server per pod of the topology, waits for ``/v1/models``, routes to it and stops it;
the server runs on this host on every runtime (``on_host``) and emits no spans of its own."""

import sys

from eppkit.backends.registry import BackendKind, register
from eppkit.observability.expected_spans import NONE
from eppkit.plan import ServiceSpec

NAME = "echo-server"


def server(s) -> ServiceSpec:
    return ServiceSpec(s.name, NAME, s.port, host=s.host, health_path="/v1/models", on_host=True,
                       argv=[sys.executable, "-m", "echo_server", "--host", s.host, "--port", str(s.port),
                             "--name", s.name, "--model", s.model])


KIND = register(BackendKind(NAME, 60, "the example's own OpenAI-compatible server", NONE,
                            lambda _backend: f"external: {NAME} (examples/own-backend)", server=server,
                            aggregated_only="it has no prefill/decode handshake"))
