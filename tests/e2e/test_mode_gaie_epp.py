"""gaie-epp through a real Envoy: the upstream GAIE EPP v1.5.0 (built once into the kit's cache) picks over
ext_proc; its pool comes from the kit's fake Kubernetes API; each mock vLLM is a Pod on its own loopback
address, all on one target port.

Trace of one request:

    client:client.request
      envoy:ingress
        envoy:async envoy.service.ext_proc.v3.ExternalProcessor.Process egress
        envoy:router picked egress
          vllm:llm_request

and, as a trace of its own (v1.5.0 reads no trace context from Envoy), found by the request's time:

    gaie-epp:gateway.request
      gaie-epp:gateway.request_orchestration     target_model
"""

import pytest
from eppkit.observability.contract import Cluster, Envoy, Service, Vllm
from eppkit.services.picker import headers

from eppkit import TraceCheck
from eppkit.core.polling import poll
from eppkit.modes import gaie_epp
from tests.support.reliability import chat_body, require_gaie_epp, topology
from tests.support.served import backend_spans

pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_prepare(gaie_epp.MODE.name)]  # built before the first test

@pytest.fixture
def bed(eppkit_shared_testbed_factory):
    require_gaie_epp()
    # The EPP's built-in plugins (queue, KV-cache, prefix-cache scorers), not the conformance config.
    return eppkit_shared_testbed_factory(topology(gaie_epp.MODE.name, vllm=("vllm-0", "vllm-1"), conformance=False))


def test_each_pod_is_on_its_own_loopback_address_sharing_one_target_port(bed):
    hosts = [ep.host for ep in bed.backends]
    assert hosts == ["127.0.0.2", "127.0.0.3"]
    assert len({ep.port for ep in bed.backends}) == 1


def test_a_request_goes_envoy_to_the_gaie_epp_to_the_pod_it_picked(bed):
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert result.status == 200, result.body
    by_name = {ep.name: ep.address for ep in bed.backends}
    pod = bed.served_pod(result.headers)
    assert result.headers.get(headers.SERVED) == by_name[pod]  # the pod that answered is the one picked

    picked = Envoy.router(Cluster.PICKED)
    trace = bed.jaeger.wait_for_trace(result.trace_id, [Envoy.INGRESS, Envoy.EXT_PROC_CALL, picked,
                                                        *backend_spans(bed)])
    check = TraceCheck(trace)
    ingress = check.one(Envoy.INGRESS, Service.ENVOY)
    for served in check.all(Vllm.REQUEST, Service.VLLM):  # a backend that traces: under the picked upstream
        assert served.is_descendant_of(check.one(picked, Service.ENVOY))
    # v1.5.0's spans are not in the request's trace...
    assert gaie_epp.OTEL_SERVICE not in trace.services()

    # ... but in one of their own, at the time of the request.
    def epp_spans():
        spans = bed.jaeger.spans_between(gaie_epp.OTEL_SERVICE, ingress.start_us - 1_000, ingress.end_us + 1_000)
        return spans if any(s.name == gaie_epp.SPAN_SCHEDULING for s in spans) else None

    spans = poll(epp_spans, timeout_s=20, interval_s=0.5, describe="the GAIE EPP's own trace in Jaeger")
    scheduling = next(s for s in spans if s.name == gaie_epp.SPAN_SCHEDULING)
    assert scheduling.trace_id != result.trace_id
    assert scheduling.parent is not None and scheduling.parent.name == gaie_epp.SPAN_REQUEST
    assert scheduling.attributes.get("target_model") == chat_body()["model"]
    assert ingress.start_us <= scheduling.start_us <= ingress.end_us


def test_the_backend_serves_the_metric_families_the_gaie_epp_reads(bed):
    client = bed.client()
    assert client.chat(chat_body()).status == 200
    log = (bed.run_dir / "epp.log").read_text()
    assert "extract failed" not in log, log[-2000:]
