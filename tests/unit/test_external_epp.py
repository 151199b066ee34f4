"""The external-epp mode: an EPP of your own, started from a command template or already running."""


import pytest
import yaml

from eppkit import modes
from eppkit.components.ports import PortAllocator
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.2", 18000), Endpoint("vllm-1", "127.0.0.3", 18000)]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}


def plan(**options):
    return modes.plan(Topology(mode="external-epp", options=options), PortAllocator(), BACKENDS)


def epp_cluster(p) -> dict:
    config = yaml.safe_load(kit.render("external-epp", {**BASE_VARS, **p.envoy_vars}))
    return next(c for c in config["static_resources"]["clusters"] if c["name"] == "epp")


def test_a_command_template_gets_its_ports_and_the_pool_and_readiness_on_grpc_health():
    p = plan(epp_command="/opt/epp --grpc-port {grpc_port} --grpc-health-port {health_port} "
                         "--metrics-port {metrics_port} --pods '{named_endpoints}' --pool {endpoints}",
             epp_env={"A": 1})
    [epp] = p.services
    argv = epp.argv
    assert argv[0] == "/opt/epp" and argv[argv.index("--grpc-port") + 1] == str(epp.port)
    health, metrics = int(argv[argv.index("--grpc-health-port") + 1]), int(argv[argv.index("--metrics-port") + 1])
    assert len({epp.port, health, metrics}) == 3
    assert epp.grpc_health_port == health and epp.health_path is None
    assert argv[argv.index("--pods") + 1] == "vllm-0=127.0.0.2:18000,vllm-1=127.0.0.3:18000"
    assert argv[argv.index("--pool") + 1] == "127.0.0.2:18000,127.0.0.3:18000"
    assert epp.env == {"A": "1"} and epp.standard_otel and epp.name == "epp"
    assert p.envoy_vars["epp_port"] == epp.port
    address = epp_cluster(p)["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert address == {"address": "127.0.0.1", "port_value": epp.port}


def test_without_a_health_port_readiness_is_grpc_health_on_the_grpc_port():
    [epp] = plan(epp_command="epp --port {grpc_port}").services
    assert epp.grpc_health_port == epp.port


def test_a_relative_program_is_the_one_where_the_kit_was_run_and_an_image_keeps_its_own(tmp_path, monkeypatch):
    # The EPP runs in the testbed's run folder: `./bin/epp` or `.venv/bin/python` typed by a user means theirs.
    monkeypatch.chdir(tmp_path)
    [epp] = plan(epp_command="bin/epp --port {grpc_port} --config epp.yaml").services
    assert epp.argv[0] == str(tmp_path / "bin" / "epp") and epp.argv[-1] == "epp.yaml"
    assert plan(epp_command="epp --port {grpc_port}").services[0].argv[0] == "epp"  # found on PATH, as a shell would
    [in_image] = plan(epp_image="my-epp:dev", epp_command="./epp --port {grpc_port}").services
    assert in_image.argv[0] == "./epp"


def test_an_address_starts_nothing_and_envoy_resolves_a_name():
    p = plan(epp_address="127.0.0.9:9002")
    assert p.services == []
    cluster = epp_cluster(p)
    assert cluster["type"] == "STATIC"
    assert cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] == {
        "address": "127.0.0.9", "port_value": 9002}
    assert epp_cluster(plan(epp_address="epp.example:9002"))["type"] == "STRICT_DNS"


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of epp_command"),
    ({"epp_command": "x {grpc_port}", "epp_address": "h:1"}, "exactly one of epp_command"),
    ({"epp_command": "x --port 9002"}, "must use {grpc_port}"),
    ({"epp_command": "x {grpc_port} {nope}"}, r"unknown placeholder\(s\) \{nope\}"),
    ({"epp_address": "no-port"}, "is not host:port"),
])
def test_bad_options_are_refused_before_anything_starts(options, message):
    with pytest.raises(ValueError, match=message):
        modes.check(Topology(mode="external-epp", options=options))


cli = kit.cli_topology


def test_the_cli_flags_choose_the_mode_and_set_its_options():
    t = cli("--epp-command", "epp {grpc_port}")
    assert (t.mode, t.options) == ("external-epp", {"epp_command": "epp {grpc_port}"})
    t = cli("--epp-address", "127.0.0.1:9002", "--set", "failure_mode_allow=true")
    assert (t.mode, t.options) == ("external-epp", {"epp_address": "127.0.0.1:9002", "failure_mode_allow": True})
    assert cli().mode == "direct"
    with pytest.raises(ValueError, match="need --mode external-epp"):
        cli("--mode", "ext_proc", "--epp-address", "127.0.0.1:9002")


def test_the_mode_is_external_and_not_among_the_kits_own():
    assert modes.get("external-epp").external
    assert "external-epp" not in modes.kit_names() and "external-epp" in modes.names()


def test_the_plugin_options_name_the_epp_of_external_epp_topologies_that_name_none():
    from eppkit.pytest_plugin.session import session_topology as _with_options

    def Config(**options):
        return kit.PluginConfig(options)

    command = Config(**{"--eppkit-epp-command": "epp --port {grpc_port}"})
    assert _with_options(command, Topology(mode="external-epp")).options == {"epp_command": "epp --port {grpc_port}"}
    assert _with_options(Config(**{"--eppkit-epp-address": "127.0.0.1:9002"}),
                         Topology(mode="external-epp")).options == {"epp_address": "127.0.0.1:9002"}
    named = Topology(mode="external-epp", options={"epp_address": "127.0.0.9:1"})
    assert _with_options(command, named).options == {"epp_address": "127.0.0.9:1"}
    assert _with_options(command, Topology(mode="ext_proc")).options == {}
