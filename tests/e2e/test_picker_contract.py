"""What every picker mode promises, checked on each (ext_proc, sidecar, lua-callout,
dynmod-callout) through a real Envoy: the test header that forces an endpoint wins (as in
the Gateway API Inference Extension conformance tests), the picker says in its span that
the pick was forced, and a client cannot choose the destination by sending the header
the picker sets. Each runs against the kit's mock vLLM and against llm-d-inference-sim (a backend
that emits no spans and knows no x-mock-* header): the contract is the pickers', whoever serves.
"""

from dataclasses import replace

import pytest
from eppkit.observability.contract import Callout, Envoy, Epp, Frontend, Service, Vllm
from eppkit.observability.expected_spans import NONE

from eppkit import TraceCheck
from eppkit.backends import MOCK, SIM
from tests.support.reliability import PICKER_MODES, TRAITS, chat_body, topology

# Under pytest-xdist each (mode, backend) testbed is a group of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_share_per("mode", "backend")]

FORCE = "x-eppkit-force-endpoint"
# The picker's decision span and the attribute that says how it chose.
PICK = {"ext_proc": (Epp.PICK, Epp.SCORER),
        "sidecar": (Epp.PICK, Epp.SCORER),
        "lua-callout": (Callout.PICK, Callout.SCORER),
        "dynmod-callout": (Callout.PICK, Callout.SCORER)}


@pytest.fixture(params=PICKER_MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture(params=(MOCK, SIM))
def backend(request) -> str:
    return request.param


@pytest.fixture
def bed(eppkit_shared_testbed_factory, mode, backend):
    """Both checks only send requests and read traces: one testbed per mode and backend serves them."""
    return eppkit_shared_testbed_factory(replace(topology(mode), backend=backend))


def test_force_header_sends_the_request_to_the_named_endpoint(bed, mode):
    client = bed.client()
    results = [client.chat(chat_body(), headers={FORCE: "vllm-1"}) for _ in range(3)]
    client.flush()
    assert [(r.status, r.headers.get("x-inference-pod")) for r in results] == [(200, "vllm-1")] * 3

    pick_span, how = PICK[mode]
    served = [] if bed.topology.backend.emits == NONE else [Vllm.REQUEST]  # the simulator traces nothing
    trace = bed.jaeger.wait_for_trace(results[-1].trace_id, [
        Envoy.INGRESS, pick_span, TRAITS[mode].upstream, *served])
    check = TraceCheck(trace)
    check.attribute(check.one(pick_span), how, "forced")
    check.before(check.one(pick_span), check.one(TRAITS[mode].upstream, Service.ENVOY))
    check.absent(Frontend.ROUTE)  # a forced pick asks no one (the sidecar's frontend included)


def test_a_client_cannot_choose_the_destination_itself(bed):
    vllm0 = next(ep for ep in bed.backends if ep.name == "vllm-0")
    client = bed.client()
    result = client.chat(chat_body(), headers={"x-gateway-destination-endpoint": vllm0.address, FORCE: "vllm-1"})
    client.flush()
    assert (result.status, result.headers.get("x-inference-pod")) == (200, "vllm-1"), result.body
