"""An EPP of your own seen as clearly as the kit's: its decision span, its own spans in the contract check,
the subset hint it is given, the protocol's health services, eppkit run's request headers."""

import asyncio

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from eppkit import TraceCheck, TraceAssertionError, modes
from eppkit.observability.trace_model import Span, Trace
from eppkit.services.echo_epp.server import EchoProcessor, Pool
from eppkit.services.epp import protocol
from eppkit.services.picker import headers
from eppkit.services.picker.core import in_subset
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool as PickerPool
from eppkit.services.picker.request import LlmRequest
from opentelemetry import trace as otel_trace
from tests.support import kit

pytestmark = pytest.mark.unit

T = "ab" * 16


def spans(*specs) -> Trace:
    """(span id, parent id, service, name, start ms, end ms) -> a trace."""
    out = [Span(sid, T, name, service, start * 1000, end * 1000, parent_id=parent)
           for sid, parent, service, name, start, end in specs]
    return Trace(T, out)


EXTERNAL = spans(("a" * 16, None, "client", "client.request", 0, 100),
                 ("b" * 16, "a" * 16, "envoy", "ingress", 1, 99),
                 ("c" * 16, "b" * 16, "envoy", "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress", 2, 9),
                 ("d" * 16, "c" * 16, "myepp", "myepp.pick", 3, 5),
                 ("e" * 16, "b" * 16, "envoy", "router picked egress", 10, 98),
                 ("f" * 16, "e" * 16, "vllm", "llm_request", 11, 97))


def test_an_epp_of_your_own_with_its_decision_span_gets_call_and_decision():
    by_name = TraceCheck(EXTERNAL).request_path("external-epp")
    assert by_name.call is not None and by_name.decision is None  # nobody said which span decides
    mode = modes.get("external-epp")
    named = mode.specialized(mode.read_options({"epp_address": "127.0.0.1:9", "decision_span": "myepp:myepp.pick"}))
    path = TraceCheck(EXTERNAL).request_path(named)
    assert path.decision.name == "myepp.pick" and path.call.name.startswith("async envoy")
    assert ("myepp", "myepp.pick") in named.spans  # and every request waits for it (expected spans)


def test_a_bad_decision_span_is_refused():
    with pytest.raises(ValueError, match="give service:span"):
        modes.check(kit.cli_topology("--epp-address", "127.0.0.1:9", "--epp-decision-span", "nocolon"))


def test_follows_contract_accepts_the_spans_you_declare():
    with pytest.raises(TraceAssertionError, match="(?s)eppkit.observability.contract.*.myepp:myepp.pick. is not declared"):
        TraceCheck(EXTERNAL).follows_contract()
    TraceCheck(EXTERNAL).follows_contract(also=["myepp:myepp.pick"])
    with pytest.raises(TraceAssertionError, match="attribute 'x' is not one you declared"):
        EXTERNAL.spans[3].attributes["x"] = 1
        TraceCheck(EXTERNAL).follows_contract(also=[("myepp", "myepp.pick", ["y"])])


def test_the_subset_hint_reads_as_a_list_or_a_string():
    msg = pb.ProcessingRequest()
    assert protocol.subset_hint(msg) is None
    fields = msg.metadata_context.filter_metadata[headers.SUBSET_METADATA].fields
    fields[headers.SUBSET].list_value.values.add().string_value = "10.0.0.1:8000"
    assert protocol.subset_hint(msg) == ("10.0.0.1:8000",)
    fields[headers.SUBSET].string_value = "10.0.0.1:8000, 10.0.0.2:8000"
    assert protocol.subset_hint(msg) == ("10.0.0.1:8000", "10.0.0.2:8000")


def test_the_picker_picks_within_the_subset_and_503s_when_none_fits():
    pool = PickerPool(parse_endpoints("a=127.0.0.1:1,b=127.0.0.1:2"))
    assert [e.name for e in in_subset(pool, LlmRequest({}, subset=("127.0.0.1:2",)), "s")] == ["b"]
    assert len(in_subset(pool, LlmRequest({}), "s")) == 2
    with pytest.raises(PickError) as exc:
        in_subset(pool, LlmRequest({}, subset=()), "s")
    assert exc.value.status == 503 and headers.SUBSET in exc.value.message


def test_the_echo_epp_decides_on_the_headers():
    epp = EchoProcessor(Pool(["127.0.0.1:1", "127.0.0.1:2"]), otel_trace.get_tracer("t"), shed_header="x-shed")

    def decide(found, subset):
        return asyncio.run(epp.decide(found, subset))

    first = decide({}, None)
    assert first.request_headers.response.clear_route_cache
    assert first.dynamic_metadata.fields["envoy.lb"].struct_value.fields[headers.DESTINATION].string_value == \
        "127.0.0.1:1,127.0.0.1:2"
    assert decide({headers.TEST_ENDPOINT_SELECTION: "127.0.0.1:2"}, None).dynamic_metadata.fields[
        "envoy.lb"].struct_value.fields[headers.DESTINATION].string_value == "127.0.0.1:2"
    assert decide({}, ("10.0.0.1:1",)).immediate_response.status.code == 503
    assert decide({"x-shed": "1"}, None).immediate_response.status.code == 429


def test_eppkit_run_takes_request_headers():
    from eppkit import options

    args = kit.parse("run", "-H", "x-api-key: k1", "--header", "x-b:2")
    assert options.request_headers(args) == {"x-api-key": "k1", "x-b": "2"}
    with pytest.raises(ValueError, match="give 'name: value'"):
        options.request_headers(kit.parse("run", "-H", "nocolon"))
