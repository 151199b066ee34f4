"""Topology option ``tracing``: off renders Envoy without a tracer and gives services no exporter (rendered, not run)."""

from pathlib import Path

import pytest
import yaml

from eppkit.components.ports import PortAllocator
from eppkit.modes import plan
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.1", 18001)]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS, "flow": "aggregated"}


def render(mode: str, **options) -> dict:
    topology = Topology(mode=mode, options=options)
    p = plan(topology, PortAllocator(), BACKENDS)
    text = kit.render(mode, {**BASE_VARS, "tracing": topology.tracing, **p.envoy_vars})
    return yaml.safe_load(text)


def hcm(config: dict) -> dict:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


@pytest.mark.parametrize("mode", ["direct", "ext_proc", "sidecar", "lua-callout"])
def test_tracing_is_on_by_default_and_off_removes_the_tracer(mode):
    on, off = hcm(render(mode)), hcm(render(mode, tracing=False))
    assert on["tracing"]["provider"]["name"] == "envoy.tracers.opentelemetry"
    assert "tracing" not in off
    # Nothing else changes: the rest of the connection manager is the same config.
    assert {k: v for k, v in on.items() if k != "tracing"} == off


def test_a_template_rendered_without_the_variable_keeps_tracing():
    text = kit.render("direct", {**BASE_VARS, **plan(Topology(), PortAllocator(), BACKENDS).envoy_vars})
    assert "tracing" in hcm(yaml.safe_load(text))


def test_services_get_no_exporter_and_no_sdk_when_tracing_is_off():
    assert Topology().service_env("127.0.0.1:4317") == {"EPPKIT_OTLP_ENDPOINT": "127.0.0.1:4317"}
    assert Topology(options={"tracing": False}).service_env("127.0.0.1:4317") == {
        "EPPKIT_OTLP_ENDPOINT": "", "OTEL_SDK_DISABLED": "true"}


def test_envoy_variants_drop_only_the_access_log_and_move_only_the_ports(monkeypatch):
    # bench/ is a folder of the checkout, not part of the installed kit: import it from there
    # (`pytest` puts no checkout folder on sys.path; `python -m pytest` would add the cwd).
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from bench.envoy_variants import on_ports, without_access_log

    text = kit.render("direct", {**BASE_VARS, **plan(Topology(), PortAllocator(), BACKENDS).envoy_vars})
    full, bare = hcm(yaml.safe_load(text)), hcm(yaml.safe_load(without_access_log(text)))
    assert full["access_log"] and "access_log" not in bare
    assert {k: v for k, v in full.items() if k != "access_log"} == bare
    moved = yaml.safe_load(on_ports(text, (2, 1), (9002, 9001)))
    assert moved["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] == 9002
    assert moved["admin"]["address"]["socket_address"]["port_value"] == 9001
