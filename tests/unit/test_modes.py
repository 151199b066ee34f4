"""The mode registry: one entry per mode, typed options, ``--set``, and the shared defaults."""

import dataclasses
from pathlib import Path

import pytest
from eppkit.services.picker.settings import DEFAULTS
from eppkit.services.vllm.config import MockLatency, VllmConfig

from eppkit import modes
from eppkit.core.paths import ENVOY_TEMPLATES
from eppkit.modes.options import parse_set
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit


def test_every_mode_is_one_complete_registry_entry():
    assert modes.names() == ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout", "external-epp",
                             "gaie-epp")
    assert modes.kit_names() == modes.names()[:5]
    for mode in modes.all_modes():
        assert (ENVOY_TEMPLATES / mode.template).is_file(), mode.name
        assert mode.color.startswith("#") and mode.summary
        assert dataclasses.is_dataclass(mode.options) and mode.options()  # every option has a default
        assert bool(mode.pickers) == (mode.picker_call is not None)
        assert mode.external or bool(mode.pickers) == (mode.decision is not None)
    assert len({m.color for m in modes.all_modes()}) == len(modes.names())


def test_an_unknown_option_names_the_valid_ones_and_a_wrong_type_names_the_option():
    with pytest.raises(ValueError, match=r"mode lua-callout: unknown option\(s\) epp_disabled; valid: .*callout_timeout_ms"):
        modes.check(Topology(mode="lua-callout", options={"epp_disabled": True}))
    with pytest.raises(ValueError, match="option failure_mode_allow must be bool, got 'yes'"):
        modes.check(Topology(mode="ext_proc", options={"failure_mode_allow": "yes"}))
    with pytest.raises(ValueError, match="unknown scorer 'least-queue'"):
        modes.check(Topology(mode="sidecar", options={"scorer": "least-queue"}))
    with pytest.raises(ValueError, match="multipart_trigger"):
        modes.check(Topology(mode="ext_proc", options={"multipart_trigger": "never"}))
    with pytest.raises(ValueError, match="unknown mode 'grpc'; choose one of direct, ext_proc"):
        modes.check(Topology(mode="grpc"))
    options = modes.options_for(Topology(mode="ext_proc", options={"metrics_interval": 1, "epp_status_on_error": 503}))
    assert (options.metrics_interval, options.epp_status_on_error) == (1.0, 503)


def test_picker_modes_default_to_the_picker_cores_settings():
    for name in ("ext_proc", "sidecar", "lua-callout", "dynmod-callout"):
        options = modes.options_for(Topology(mode=name))
        assert (options.scorer, options.metrics_interval) == (DEFAULTS.scorer, DEFAULTS.metrics_interval)


def test_only_the_modes_that_say_so_run_the_multipart_flow():
    modes.check(Topology(mode="ext_proc", flow="multipart"))
    with pytest.raises(ValueError, match="--flow multipart needs --mode ext_proc \\(got --mode sidecar\\)"):
        modes.check(Topology(mode="sidecar", flow="multipart"))


@pytest.mark.parametrize("items, expected", [
    (["scorer=round-robin"], {"scorer": "round-robin"}),  # not JSON: a string
    (["failure_mode_allow=true", "metrics_interval=0.5"], {"failure_mode_allow": True, "metrics_interval": 0.5}),
    (['scorer_parameters={"hashBlockSize": 8}'], {"scorer_parameters": {"hashBlockSize": 8}}),
    (["epp_args=[\"--log-level\", \"DEBUG\"]", "epp_status_on_error=null"],
     {"epp_args": ["--log-level", "DEBUG"], "epp_status_on_error": None}),
])
def test_set_reads_values_as_json_when_they_parse(items, expected):
    assert parse_set(items) == expected


def test_set_needs_key_equals_value():
    with pytest.raises(ValueError, match="key=value"):
        parse_set(["scorer"])


cli_topology = kit.cli_topology


def test_up_and_run_set_any_mode_option_and_any_latency_knob():
    topology = cli_topology("--mode", "ext_proc", "--set", "scorer=round-robin", "--set", "epp_keepalive_ms=200",
                            "--time-to-first-token", "20", "--kv-cache-transfer-latency-std-dev", "3")
    assert topology.options == {"scorer": "round-robin", "epp_keepalive_ms": 200}
    assert (topology.latency.time_to_first_token, topology.latency.kv_cache_transfer_latency_std_dev) == (20, 3)
    modes.check(topology)


def test_latency_knobs_have_one_definition_and_one_set_of_defaults():
    latency = MockLatency()
    assert Topology().latency == latency == cli_topology().latency
    assert {f.name for f in dataclasses.fields(MockLatency)} <= {f.name for f in dataclasses.fields(VllmConfig)}
    assert latency.args() == []  # the mock's own defaults: nothing to pass
    assert MockLatency(time_to_first_token=20, inter_token_latency=2.5).args() == [
        "--time-to-first-token", "20", "--inter-token-latency", "2.5"]


def test_the_plugin_options_in_the_api_docs_are_the_options_table():
    from eppkit.options import plugin_table

    assert plugin_table() in (Path(__file__).parents[2] / "docs" / "api.md").read_text(), \
        "regenerate docs/api.md's option table: python -m eppkit.options"
