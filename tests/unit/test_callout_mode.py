"""The lua-callout mode plug-in and its template, rendered but not run (Envoy validates it in e2e)."""

import pytest

from eppkit.components.ports import PortAllocator
from eppkit.gateway.body_routing import body_routing_vars
from eppkit.gateway.lua import lua_literal
from eppkit.modes import plan as plan_mode
from eppkit.plan import Endpoint, ModePlan
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [
    Endpoint("vllm-0", "127.0.0.1", 8001, model="m-a"),
    Endpoint("vllm-1", "127.0.0.1", 8002, model="org/m b"),
    Endpoint("vllm-2", "127.0.0.1", 8003, model="m-a"),
]


def lua_plan(options: dict) -> ModePlan:
    return plan_mode(Topology(mode="lua-callout", options=options), PortAllocator(), BACKENDS)


def render(options: dict) -> tuple[str, ModePlan]:
    plan = lua_plan(options)
    base = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}
    return kit.render("lua-callout", {**base, **plan.envoy_vars}), plan


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "nil"),
        (True, "true"),
        (1500, "1500"),
        ('a"b\\c\n', '"a\\034b\\092c\\010"'),  # quotes, backslashes, control bytes: decimal escapes
        ("é", '"\\195\\169"'),  # UTF-8 bytes, which Lua 5.1 strings hold as they are
        (["x", False], '{"x", false}'),
        ({"k": [1]}, '{["k"] = {1}}'),
    ],
)
def test_lua_literal_writes_lua_51_expressions(value, expected):
    assert lua_literal(value) == expected


def test_plan_starts_the_callout_with_the_pool_and_scorer():
    plan = lua_plan({"scorer": "prefix-cache-scorer", "pick_latency_ms": 5})
    [spec] = plan.services
    assert (spec.name, spec.module, spec.health_path) == ("callout", "eppkit.services.callout", "/health")
    assert spec.args == ["--endpoints", "vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002,vllm-2=127.0.0.1:8003",
                         "--scorer", "prefix-cache-scorer", "--metrics-interval", "0.2", "--shed-queue-threshold", "0",
                         "--max-fallbacks", "2", "--pick-latency", "5"]
    assert plan.envoy_vars["callout_port"] == spec.port


def test_plan_passes_options_to_the_lua_filter_as_a_config_table():
    plan = lua_plan({"failure_mode_allow": True, "callout_timeout_ms": 250})
    source = plan.envoy_vars["lua_callout_source"]
    first_line, rest = source.split("\n", 1)
    assert first_line == ('EPPKIT_CALLOUT = {["cluster"] = "callout", ["timeout_ms"] = 250, ["failure_mode_allow"] = true, '
                          '["destination_header"] = "x-gateway-destination-endpoint", ["lb_metadata"] = "envoy.lb", '
                          '["forward_headers"] = {"test-epp-endpoint-selection"}}')
    assert "function envoy_on_request(handle)" in rest


def test_without_body_routing_there_is_one_pool_and_no_router():
    text, plan = render({})
    assert [p["cluster"] for p in plan.envoy_vars["pools"]] == ["pool"]
    assert "eppkit.body_router" not in text
    assert "name: eppkit.lua_callout" in text
    assert "ext_proc" not in text[text.index("http_filters:"):]  # (the access log names its filter state, null here)
    assert "- name: picked\n    type: STATIC" in text  # its load balancing: test_picked_cluster.py


def test_body_routing_builds_one_pool_per_model_and_tells_the_callout_each_model():
    text, plan = render({"body_routing": True})
    pools = plan.envoy_vars["pools"]
    assert [(p["model"], p["cluster"], [e.name for e in p["endpoints"]]) for p in pools] == [
        ("m-a", "pool_m-a", ["vllm-0", "vllm-2"]),
        ("org/m b", "pool_org_m_b", ["vllm-1"]),
    ]
    assert "vllm-1=127.0.0.1:8002@org/m b" in plan.services[0].args[1]
    # the body router (read the model, reject bad ones, name it) comes first, then the callout, then Envoy's router
    assert (text.index("envoy.filters.http.json_to_metadata") < text.index("eppkit.body_router.reject")
            < text.index("eppkit.lua_callout") < text.index("envoy.filters.http.router"))
    assert 'value: {"string_match": {"exact": "org/m b"}}' in text  # the pool's routes and the served list
    assert text.count("cluster: picked\n") == 2  # one picked route per model, one picked cluster
    assert "status_code: 404" in text and "served models: m-a, org/m b" in text


def test_without_body_routing_one_pool_holds_every_backend():
    assert body_routing_vars(False, BACKENDS) == {"body_routing": False, "pools": [
        {"model": None, "cluster": "pool", "endpoints": BACKENDS}]}
