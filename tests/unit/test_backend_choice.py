"""Backends behind the pickers (eppkit.backends, eppkit.backends.inference_sim): the URL syntax, what each
backend can serve, which spans a trace must hold with it, the simulator's command line, and the
pickers' configurable load metrics. No processes."""

import argparse
import logging
import sqlite3

import pytest
from eppkit.observability import expected_spans as ex
from eppkit.observability.contract import Pd, Vllm
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.settings import DEFAULTS, PickerSettings, add_arguments, service_args, settings_from_args
from eppkit.services.vllm.config import MockLatency

from eppkit import backends, cli, compare, flows, modes, options
from eppkit.backends import MOCK, SIM, VLLM, Backend, inference_sim, parse_url
from eppkit.components.ports import PortAllocator
from eppkit.topology import Topology, VllmSpec
from tests.support import kit

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("spec, expected", [
    ("http://127.0.0.1:8000", ("127.0.0.1:8000", "127.0.0.1", 8000, "")),
    ("a=http://127.0.0.1:8000@org/model-7b", ("a", "127.0.0.1", 8000, "org/model-7b")),
    ("  b = http://localhost:9@m ", ("b", "127.0.0.1", 9, "m")),  # a host name resolved: Envoy's pool takes addresses
    ("http://localhost:9/", ("localhost:9", "127.0.0.1", 9, "")),
])
def test_backend_urls_give_name_address_and_model(spec, expected):
    ep = parse_url(spec, role="decode")
    assert (ep.name, ep.host, ep.port, ep.model) == expected
    assert ep.role == "decode"


@pytest.mark.parametrize("spec, why", [
    ("127.0.0.1:8000", "is not"),
    ("https://127.0.0.1:8000", "only http://"),
    ("http://127.0.0.1", "needs a host and a port"),
    ("http://127.0.0.1:8000/v1", "only scheme, host and port"),
    ("http://127.0.0.1:99999", "needs a host and a port"),
    ("http://no-such-host.invalid:80", "cannot resolve"),
])
def test_bad_backend_urls_say_what_is_wrong(spec, why):
    with pytest.raises(ValueError, match=why):
        parse_url(spec)


def test_backend_kinds_labels_and_default_spans():
    assert (Backend().kind, Backend().external, Backend().emits) == (MOCK, False, ex.FULL)
    sim = Backend.of(SIM)
    assert (sim.kind, sim.external, sim.emits) == (SIM, True, ex.NONE)
    assert sim.label.startswith("external: llm-d-inference-sim")
    urls = Backend(urls=("http://127.0.0.1:1",), spans=ex.LLM_REQUEST)
    assert (urls.kind, urls.external, urls.emits) == (backends.URLS, True, ex.LLM_REQUEST)
    assert "external" in urls.label
    assert Topology(backend=SIM).backend == sim  # a preset name is enough
    with pytest.raises(TypeError):
        Backend.of(3)


@pytest.mark.parametrize("backend, flow, why", [
    (Backend(preset="tgi"), "aggregated", "unknown backend"),
    (Backend(preset=VLLM), "pd", "aggregated requests only"),
    (Backend(command="vllm serve m"), "aggregated", "is for --backend vllm"),
    (Backend(spans="some"), "aggregated", "choose one of"),
    (Backend(preset=SIM, urls=("http://127.0.0.1:1",)), "aggregated", "cannot be combined"),
    (Backend(preset=SIM), "epd", "needs the kit's mock"),
    (Backend(urls=("http://127.0.0.1:1",)), "multipart", "needs the kit's mock"),
    (Backend(urls=("http://127.0.0.1:1",)), "pd", "give --prefill-url and --decode-url"),
    (Backend(decode_urls=("http://127.0.0.1:1",)), "ttft", "at least one --prefill-url"),
    (Backend(prefill_urls=("http://127.0.0.1:1",), decode_urls=("http://127.0.0.1:2",)), "aggregated", "use --backend-url"),
])
def test_a_backend_that_cannot_serve_the_flow_is_refused(backend, flow, why):
    with pytest.raises(ValueError, match=why):
        backend.validate(flows.get(flow))


def test_the_simulator_is_refused_where_pods_have_addresses_of_their_own_and_vllm_is_not():
    gaie = modes.get("gaie-epp")
    assert gaie.watches_pool(gaie.read_options({}))
    with pytest.raises(ValueError, match="binds every interface"):
        modes.check(Topology(mode=gaie.name, backend=SIM))
    Backend(preset=VLLM).validate(flows.get("aggregated"), pod_addresses=True)  # vLLM binds the address it is given


def test_the_cli_refuses_a_backend_that_cannot_serve_the_flow_as_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--backend", SIM, "--flow", "epd"])
    assert exc.value.code == 2
    assert "encoder cache" in capsys.readouterr().err


def test_backend_flags_read_into_a_backend():
    args = kit.parse("run", "--prefill-url", "p=http://127.0.0.1:1", "--decode-url", "http://127.0.0.1:2@m",
                     "--decode-url", "http://127.0.0.1:3", "--backend-spans", "llm_request")
    assert options.backend(args) == Backend(prefill_urls=("p=http://127.0.0.1:1",),
                                            decode_urls=("http://127.0.0.1:2@m", "http://127.0.0.1:3"),
                                            spans="llm_request")
    assert options.backend(kit.parse("run")) == Backend()


@pytest.mark.parametrize("flow", ["aggregated", "pd", "ttft", "epd"])
@pytest.mark.parametrize("mode", modes.names())
def test_expected_spans_follow_what_the_backend_emits(mode, flow):
    names = {spans: {(r.name, r.service): r.count for r in kit.expected(mode, flow, 1, backend_spans=spans)}
             for spans in ex.BACKEND_SPANS}
    ours = {k: v for k, v in names[ex.FULL].items() if k[1] != "vllm"}
    assert names[ex.NONE] == ours  # every span of the kit's own parts stays expected
    llm = {k: v for k, v in names[ex.LLM_REQUEST].items() if k not in ours}
    assert list(llm) == [(Vllm.REQUEST, "vllm")] and llm[(Vllm.REQUEST, "vllm")] == (1 if flow == "aggregated" else 2)
    if flow != "aggregated":
        assert (Pd.PREFILL, "pd-sidecar") in names[ex.NONE]
    with pytest.raises(ValueError, match="backend_spans"):
        kit.expected(mode, flow, backend_spans="most")


def test_the_simulator_gets_every_latency_knob_in_its_units():
    flags = inference_sim.latency_flags(MockLatency(time_to_first_token=100, inter_token_latency=2.5,
                                                    time_factor_under_load=1.5))
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--time-to-first-token"] == "100ms" and pairs["--inter-token-latency"] == "2.5ms"
    assert pairs["--time-factor-under-load"] == "1.5"  # a factor has no unit
    assert "--ec-miss-latency" not in pairs  # no encoder cache in the simulator
    # The per-token prefill model is the simulator's only when its fixed TTFT is 0, as the mock switches.
    per_token = dict(zip(*[iter(inference_sim.latency_flags(MockLatency(prefill_time_per_token=5)))] * 2))
    assert per_token["--time-to-first-token"] == "0ms" and per_token["--prefill-time-per-token"] == "5ms"


def test_the_simulator_command_pins_model_capacity_and_the_fixed_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    argv = inference_sim.command("/bin/sim", port=1234, model="mock-llm", seed=7, latency=MockLatency())
    args = {flag: value for flag, value in zip(argv, argv[1:]) if flag.startswith("--")}
    assert argv[0] == "/bin/sim" and "--force-dummy-tokenizer" in argv
    assert (args["--port"], args["--model"], args["--seed"], args["--max-model-len"]) == ("1234", "mock-llm", "7", "8192")
    db = sqlite3.connect(argv[argv.index("--dataset-path") + 1])
    [(n, text)] = db.execute("SELECT n_gen_tokens, gen_tokens FROM llmd").fetchall()
    assert n == inference_sim.DATASET_TOKENS and '"t0 "' in text
    assert inference_sim.env("vllm-3") == {"POD_NAME": "vllm-3"}


def test_the_simulator_preset_takes_the_mocks_places(tmp_path, monkeypatch):
    fake = tmp_path / "sim"
    fake.write_text("")
    monkeypatch.setenv(inference_sim.TOOL.env_var, str(fake))
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    topo = Topology(mode="ext_proc", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")], backend=SIM)
    plan = kit.plan_flow(topo, PortAllocator(), tmp_path)
    assert [(s.name, s.argv[0], s.env, s.health_path) for s in plan.services] == [
        (n, str(fake), {"POD_NAME": n}, inference_sim.READY_PATH) for n in ("vllm-0", "vllm-1")]
    assert [e.name for e in plan.routable] == ["vllm-0", "vllm-1"]
    pd = kit.plan_flow(Topology(flow="pd", backend=SIM), PortAllocator(), tmp_path)
    assert [s.name for s in pd.services] == ["vllm-p0", "vllm-d0", "pd-sidecar-0"]
    assert pd.services[0].argv and pd.services[2].argv is None  # the kit's own sidecar, in front


def test_a_missing_simulator_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv(inference_sim.TOOL.env_var, str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match="eppkit bootstrap --backend llm-d-inference-sim"):
        inference_sim.require_binary()


def test_compare_options_take_the_backend_and_refuse_what_it_cannot_serve():
    options = compare.CompareOptions(modes=("direct",), scenarios=("chat",), backend=Backend(preset=SIM))
    topo = compare.topology_for(options.validate(), "direct", compare.SCENARIOS["chat"])
    assert topo.backend.kind == SIM
    with pytest.raises(ValueError, match="needs the kit's mock"):
        compare.CompareOptions(scenarios=("multimodal",), backend=Backend(preset=SIM)).validate()


def test_load_metric_names_are_settings_passed_to_the_services():
    p = argparse.ArgumentParser()
    add_arguments(p)
    custom = PickerSettings(waiting_metric="sglang:num_queue_reqs", running_metric="sglang:num_running_reqs")
    args = service_args(custom, [])
    assert args[-4:] == ["--waiting-metric", "sglang:num_queue_reqs", "--running-metric", "sglang:num_running_reqs"]
    assert settings_from_args(p.parse_args(args)) == custom
    assert "--waiting-metric" not in service_args(DEFAULTS, [])  # vLLM's names are the default
    with pytest.raises(ValueError, match="cannot be empty"):
        PickerSettings(waiting_metric=" ").validate()


def test_an_endpoint_without_the_load_metrics_gets_one_warning(caplog):
    ep = PoolEndpoint("sg-0", "127.0.0.1", 1)
    pool = Pool([ep], waiting_metric="q", running_metric="r")
    with caplog.at_level(logging.WARNING, logger="picker.pool"):
        pool.record_scrape(ep, {"vllm:num_requests_waiting": 3.0})
        pool.record_scrape(ep, {"vllm:num_requests_waiting": 3.0})
    [warning] = [r.getMessage() for r in caplog.records]
    assert "sg-0" in warning and "no q or r" in warning and "--waiting-metric" in warning
    assert ep.waiting is None  # unknown, as before any scrape
    caplog.clear()
    pool.record_scrape(ep, {"q": 2.0, "r": 1.0})
    assert (ep.waiting, ep.running, caplog.records) == (2.0, 1.0, [])
