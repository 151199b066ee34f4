"""The picked cluster every picker mode shares (envoy/_picked.j2), rendered, not run.

What the GAIE reference data planes do with an EPP's pick: a STATIC cluster of every backend whose
override_host load balancer reads envoy.lb / x-gateway-destination-endpoint (primary, then
fallbacks), retries that walk that list, and the endpoint that served written back as
envoy.lb / x-gateway-destination-endpoint-served.
"""

import pytest
import yaml
from eppkit.observability.contract import Cluster
from eppkit.services.picker import headers

from eppkit import modes
from eppkit.builds import dynmod as dynmod_build
from eppkit.builds import gaie as gaie_build
from eppkit.components.ports import PortAllocator
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.2", 18001), Endpoint("vllm-1", "127.0.0.3", 18001, model="m-b")]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}
PICKER_MODES = [m.name for m in modes.all_modes() if m.upstream == modes.get("ext_proc").upstream]
OVERRIDE_HOST = "envoy.load_balancing_policies.override_host"


@pytest.fixture(autouse=True)
def no_build(monkeypatch):
    monkeypatch.setattr(dynmod_build, "build", lambda progress=print, **kw: "/cache/libeppkit_callout.so")
    monkeypatch.setattr(gaie_build, "build", lambda progress=print, **kw: "/cache/gaie-epp/v1.5.0/epp")


def render(mode: str, **options) -> dict:
    if mode == "external-epp":
        options.setdefault("epp_address", "127.0.0.1:9002")
    plan = kit.plan_mode(Topology(mode=mode, options=options), BACKENDS)
    return yaml.safe_load(kit.render(mode, {**BASE_VARS, **plan.envoy_vars}))


def clusters(config: dict) -> dict[str, dict]:
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def routes(config: dict) -> list[dict]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["route_config"]["virtual_hosts"][0]["routes"]


def test_every_picker_mode_is_covered():
    assert set(PICKER_MODES) >= {"ext_proc", "sidecar", "lua-callout", "dynmod-callout", "external-epp"}
    assert "direct" not in PICKER_MODES


@pytest.mark.parametrize("mode", PICKER_MODES)
@pytest.mark.parametrize("body_routing", [False, True])
def test_the_picked_cluster_is_every_backend_behind_override_host_on_the_metadata(mode, body_routing):
    picked = clusters(render(mode, body_routing=body_routing))[Cluster.PICKED]
    assert picked["type"] == "STATIC"  # override_host only looks hosts up among the cluster's members
    members = [e["endpoint"]["address"]["socket_address"] for e in picked["load_assignment"]["endpoints"][0]["lb_endpoints"]]
    assert [f"{m['address']}:{m['port_value']}" for m in members] == [ep.address for ep in BACKENDS]
    [policy] = picked["load_balancing_policy"]["policies"]
    ext = policy["typed_extension_config"]
    assert ext["name"] == OVERRIDE_HOST
    # The metadata alone: with the header as a second source Envoy would join both lists and a
    # client could steer by sending the header.
    assert ext["typed_config"]["override_host_sources"] == [
        {"metadata": {"key": headers.LB_METADATA, "path": [{"key": headers.DESTINATION}]}}]
    assert ext["typed_config"]["selected_host_key"] == {"key": headers.LB_METADATA, "path": [{"key": headers.SERVED}]}


@pytest.mark.parametrize("mode", PICKER_MODES)
@pytest.mark.parametrize("max_fallbacks", [0, 2, 3])
def test_the_picked_route_matches_the_metadata_and_retries_once_per_fallback(mode, max_fallbacks):
    picked = [r for r in routes(render(mode, max_fallbacks=max_fallbacks)) if r["route"].get("cluster") == Cluster.PICKED]
    assert len(picked) == 1
    [route] = picked
    assert {"filter": headers.LB_METADATA, "path": [{"key": headers.DESTINATION}],
            "value": {"present_match": True}} in route["match"]["dynamic_metadata"]
    assert "headers" not in route["match"]  # never the header: a client cannot pick
    retry = route["route"].get("retry_policy")
    if max_fallbacks == 0:
        assert retry is None
    else:
        assert retry["num_retries"] == max_fallbacks
        # Only failures before any request byte reached a backend: no generation is sent twice.
        assert set(retry["retry_on"].split(",")) == {"connect-failure", "refused-stream", "reset-before-request"}
    [served] = route["response_headers_to_add"]
    assert served["header"] == {"key": headers.SERVED, "value": f"%DYNAMIC_METADATA({headers.LB_METADATA}:{headers.SERVED})%"}


@pytest.mark.parametrize("mode", ["lua-callout", "dynmod-callout"])
def test_with_body_routing_a_pick_counts_only_for_its_models_pool(mode):
    picked = [r for r in routes(render(mode, body_routing=True)) if r["route"].get("cluster") == Cluster.PICKED]
    models = [[m for m in r["match"]["dynamic_metadata"] if m["filter"] == "eppkit.body"] for r in picked]
    assert [m[0]["value"]["string_match"]["exact"] for m in models] == ["mock-llm", "m-b"]


@pytest.mark.parametrize("mode", ["ext_proc", "sidecar", "external-epp"])
def test_the_epp_sees_the_lb_namespace_both_ways(mode):
    text = kit.render(mode, {**BASE_VARS, **modes.plan(
        Topology(mode=mode, options={"epp_address": "127.0.0.1:9"} if mode == "external-epp" else {}),
        PortAllocator(), BACKENDS).envoy_vars})
    assert f"receiving_namespaces: {{untyped: [{headers.LB_METADATA}]}}" in text
    # and the subset hint's namespace on the way to it
    assert f"forwarding_namespaces: {{untyped: [{headers.LB_METADATA}, {headers.SUBSET_METADATA}]}}" in text
