"""The ext_proc and sidecar mode plug-ins and their Envoy templates (rendered, not run)."""


import pytest

from eppkit.components.ports import PortAllocator
from eppkit.modes import plan
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.1", 18001), Endpoint("vllm-1", "127.0.0.1", 18002, model="other")]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}


def render(mode, **options):
    p = plan(Topology(mode=mode, options=options), PortAllocator(), BACKENDS)
    return p, kit.render(mode, {**BASE_VARS, **p.envoy_vars})


def arg(args, flag):
    return args[args.index(flag) + 1]


def test_ext_proc_plan_starts_the_epp_on_grpc_with_the_named_pool():
    p, _ = render("ext_proc", scorer="prefix-cache-scorer", shed_queue_threshold=3)
    (epp,) = p.services
    assert (epp.name, epp.module, epp.health_path) == ("epp", "eppkit.services.epp", None)
    assert arg(epp.args, "--endpoints") == "vllm-0=127.0.0.1:18001,vllm-1=127.0.0.1:18002"
    assert arg(epp.args, "--scorer") == "prefix-cache-scorer"
    assert arg(epp.args, "--shed-queue-threshold") == "3"
    assert p.envoy_vars["epp_port"] == epp.port


def test_sidecar_plan_starts_the_frontend_first_and_points_the_epp_at_it():
    p, _ = render("sidecar", scorer="kv-router-scorer", shed_queue_threshold=2,
                  scorer_parameters={"blockSize": 8})
    frontend, epp = p.services
    assert (frontend.module, frontend.health_path) == ("eppkit.services.frontend", "/health")
    assert arg(epp.args, "--frontend-url") == f"http://127.0.0.1:{frontend.port}"
    # Both get every picker setting through the same flags (the EPP scores the prefillers with them).
    for service in (frontend, epp):
        assert arg(service.args, "--scorer") == "kv-router-scorer"
        assert arg(service.args, "--shed-queue-threshold") == "2"
        assert arg(service.args, "--scorer-parameters") == '{"blockSize":8}'
    assert epp.health_path is None
    assert p.envoy_vars["epp_port"] == epp.port != frontend.port


def test_epp_disabled_keeps_envoy_pointed_at_a_port_nobody_serves():
    p, text = render("ext_proc", epp_disabled=True)
    assert p.services == []
    assert f"port_value: {p.envoy_vars['epp_port']}" in text


@pytest.mark.parametrize("mode", ["ext_proc", "sidecar"])
@pytest.mark.parametrize("allow", [False, True])
def test_failure_mode_allow_is_rendered(mode, allow):
    _, text = render(mode, failure_mode_allow=allow)
    assert f"failure_mode_allow: {'true' if allow else 'false'}" in text


def test_template_speaks_the_epp_protocol():
    _, text = render("ext_proc", epp_status_on_error=503)
    assert "request_body_mode: FULL_DUPLEX_STREAMED" in text
    assert "receiving_namespaces: {untyped: [envoy.lb]}" in text
    assert "status_on_error: {code: 503}" in text
    # The picked route keys on the EPP's metadata (the cluster: test_picked_cluster.py).
    picked_route = text[text.index("- name: picked"):text.index("- name: default_pool")]
    assert "filter: envoy.lb" in picked_route and "cluster: picked" in picked_route
    # The EPP cluster speaks HTTP/2 and is health checked, without panic routing (fail-open relies on it).
    epp_cluster = text[text.index("- name: epp"):text.index("- name: picked\n    type")]
    assert "http2_protocol_options" in epp_cluster and "tcp_health_check" in epp_cluster
    assert "healthy_panic_threshold: {value: 0}" in epp_cluster


def test_body_routing_puts_the_model_router_before_the_epp_and_a_pool_per_model():
    p, text = render("ext_proc", body_routing=True)
    assert arg(p.services[0].args, "--endpoints") == "vllm-0=127.0.0.1:18001@mock-llm,vllm-1=127.0.0.1:18002@other"
    filters = text[text.index("http_filters:"):]
    assert filters.index("eppkit.body_router.reject") < filters.index("- name: envoy.filters.http.ext_proc")  # bad models never reach the EPP
    assert "- name: pool_mock-llm" in text and "- name: pool_other" in text
    routes = text[text.index("routes:"):text.index("clusters:")]
    assert routes.index("- name: picked") < routes.index("eppkit.body")  # a decision beats the per-model default
