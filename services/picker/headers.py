"""Every HTTP header a picker reads or writes, named once.

The transports (services/epp, services/callout, services/frontend), the Envoy templates' variables
and the kit's tests import these names; nothing spells them again.
"""

from __future__ import annotations

# The decision, as the Gateway API Inference Extension's EPP protocol names it: "host:port", or the
# primary and its fallbacks "host:port,host:port,..."; the same value goes into the dynamic metadata
# LB_METADATA / DESTINATION, which Envoy's "picked" cluster (override_host) reads.
DESTINATION = "x-gateway-destination-endpoint"
# The endpoint that served, as Envoy's load balancer reports it (LB_METADATA / SERVED, and the
# response header of the same name).
SERVED = "x-gateway-destination-endpoint-served"
# The dynamic-metadata namespace of the EPP protocol (Envoy's load-balancer namespace).
LB_METADATA = "envoy.lb"
# The subset hint (the data plane to the EPP, in the ext_proc request's metadata): pick only among these
# endpoints, "ip:port" each, as a list (the protocol) or a comma-separated string; none eligible: 503.
SUBSET_METADATA = "envoy.lb.subset_hint"
SUBSET = "x-gateway-destination-endpoint-subset"
# The request's InferenceObjective (GAIE's objective header, pkg/epp/metadata): its priority decides whether it may be
# shed when the pool is saturated (services/picker/saturation.py).
OBJECTIVE = "x-gateway-inference-objective"
# Sidecar mode: the frontend's worker id, passed on next to the destination.
WORKER_ID = "x-gateway-worker-id"
# Set by the body-based router in front (if any); else the body's "model" is used.
MODEL = "x-gateway-model-name"
# Disaggregated flows, as llm-d passes them to its routing sidecar (services/pd_sidecar).
PREFILLER = "x-prefiller-host-port"
ENCODERS = "x-encoder-hosts-ports"
# Sidecar mode: the EPP's routing query to the frontend.
ROUTING_REQUEST = "x-routing-request"

# Test steering: a comma-separated list of endpoint names or addresses; the first one in the pool
# wins, the rest become fallbacks. A name outside the pool is a 503.
FORCE_ENDPOINT = "x-eppkit-force-endpoint"
# The GAIE conformance suite's test header, honoured the same way by every kit picker (its values
# are "IP" or "IP:port"; an IP alone names every endpoint on that host).
TEST_ENDPOINT_SELECTION = "test-epp-endpoint-selection"
FORCE_PREFILLER = "x-eppkit-force-prefiller"
FORCE_ENCODERS = "x-eppkit-force-encoders"
# Test steering: shed this request (429), as a saturated pool would.
SHED = "x-eppkit-shed"

TRUE_VALUES = frozenset({"1", "true", "yes", "on"})


def is_true(value: str | None) -> bool:
    """A steering header's value read as a flag (``1``, ``true``, ``yes``, ``on``)."""
    return value is not None and value.strip().lower() in TRUE_VALUES
