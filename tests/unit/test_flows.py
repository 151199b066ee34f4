"""Flow layouts and their plumbing into the modes (planned and rendered, nothing started)."""

from pathlib import Path

import pytest

from eppkit import cli, flows, modes
from eppkit.builds import dynmod as dynmod_build
from eppkit.components.ports import PortAllocator
from eppkit.plan import Endpoint
from eppkit.topology import Topology, VllmSpec
from tests.support import kit

pytestmark = pytest.mark.unit

BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3}
PICKER_MODES = ("ext_proc", "sidecar", "lua-callout", "dynmod-callout")


@pytest.fixture(autouse=True)
def no_build(monkeypatch):
    """dynmod-callout's plan builds the Go module; planning needs only its path."""
    monkeypatch.setattr(dynmod_build, "build", lambda progress=print, **kw: Path("/cache/dynmod/x/libeppkit_callout.so"))


def arg(args, flag):
    return args[args.index(flag) + 1]


def layout(tmp_path, **kw) -> flows.FlowPlan:
    return kit.plan_flow(Topology(**kw), PortAllocator(), tmp_path)


@pytest.mark.parametrize("mode", ["direct", "sidecar", "lua-callout", "dynmod-callout"])
def test_multipart_flow_needs_the_ext_proc_mode(tmp_path, mode):
    with pytest.raises(ValueError, match=r"--flow multipart needs --mode ext_proc \(got --mode " + mode):
        layout(tmp_path, mode=mode, flow="multipart")


def test_cli_refuses_multipart_outside_ext_proc_as_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--flow", "multipart", "--mode", "lua-callout"])
    assert exc.value.code == 2
    assert "--flow multipart needs --mode ext_proc" in capsys.readouterr().err


def test_unknown_flow_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown flow"):
        layout(tmp_path, mode="ext_proc", flow="nope")


def test_multipart_starts_the_topologys_vllms_and_routes_to_them(tmp_path):
    plan = layout(tmp_path, mode="ext_proc", flow="multipart", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")])
    assert [s.name for s in plan.services] == ["vllm-0", "vllm-1"]
    assert [e.name for e in plan.routable] == ["vllm-0", "vllm-1"]
    assert plan.prefill == [] and plan.encoders == []


def render_ext_proc(flow: str, pools=None, backends=None, **options):
    backends = backends or [Endpoint("vllm-0", "127.0.0.1", 18001)]
    p = modes.plan(Topology(mode="ext_proc", flow=flow, options=options), PortAllocator(), backends, pools=pools)
    return p, kit.render("ext_proc", {**BASE_VARS, "backends": backends, **p.envoy_vars})


def test_multipart_runs_the_epp_two_phase_and_sends_it_the_response():
    p, text = render_ext_proc("multipart", multipart_trigger="headers")
    (epp,) = p.services
    assert "--multipart" in epp.args and arg(epp.args, "--multipart-trigger") == "headers"
    assert "response_header_mode: SEND" in text and "response_body_mode: FULL_DUPLEX_STREAMED" in text


def test_aggregated_keeps_the_response_away_from_the_epp():
    p, text = render_ext_proc("aggregated")
    assert "--multipart" not in p.services[0].args
    assert "response_header_mode: SKIP" in text and "response_body_mode: NONE" in text


def test_disaggregated_layouts_hand_prefillers_and_encoders_to_every_picker(tmp_path):
    plan = layout(tmp_path, flow="epd", prefill=2, decode=1, encoders=2)
    prefill = ",".join(f"{e.name}={e.address}#prefill" for e in plan.prefill)  # each with its llm-d.ai/role
    encoders = ",".join(f"{e.name}={e.address}" for e in plan.encoders)
    assert [e.name for e in plan.prefill] == ["vllm-p0", "vllm-p1"]
    for mode in PICKER_MODES:
        mode_plan = modes.plan(Topology(mode=mode, flow="epd"), PortAllocator(), plan.routable, pools=plan)
        picker = next(s for s in mode_plan.services if s.name in ("epp", "callout"))
        assert arg(picker.args, "--prefill-endpoints") == prefill
        assert arg(picker.args, "--encoder-endpoints") == encoders


@pytest.mark.parametrize("mode", PICKER_MODES)
def test_without_stage_pools_no_stage_arguments(mode):
    mode_plan = modes.plan(Topology(mode=mode), PortAllocator(), [Endpoint("vllm-0", "127.0.0.1", 18001)])
    for spec in mode_plan.services:
        assert "--prefill-endpoints" not in spec.args and "--encoder-endpoints" not in spec.args
