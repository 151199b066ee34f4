"""The `eppkit` command as a person uses it: doctor, run, and up until Ctrl-C with nothing left
behind — on the runtime under test (`--eppkit-runtime local` or `docker`)."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
from eppkit.observability.client import TracedClient
from eppkit.observability.jaeger_client import JaegerClient

from eppkit import modes, runtimes
from eppkit.backends import inference_sim
from eppkit.compare import report as rp
from eppkit.core import procfs
from eppkit.core.polling import poll
from eppkit.pytest_plugin.session import require_simulator
from eppkit.pytest_plugin.state import require
from eppkit.ui import zipkin
from tests.support import chromium as _chromium
from tests.support import kit
from tests.support.cli import EPPKIT, REPO_ROOT, start_up
from tests.support.contract import CONTRACT, cases

pytestmark = pytest.mark.e2e


def _kit_children(pid: int, runtime: str) -> set:
    """What `eppkit up` (process ``pid``) runs: the processes under it (the services forked by its zygote too), its
    containers, or its pods."""
    if runtime == "local":
        return procfs.descendants(pid)
    if runtime == "kubernetes":
        from eppkit.cluster import handle, namespaces

        return namespaces.owned_by(pid, handle.named().client())  # the cluster this environment names
    from eppkit.components import container as containers

    return {c.name for c in containers.find({"label": f"eppkit.owner-pid={pid}"})}


@CONTRACT  # it lists the runtime's own prerequisites (the engine, the images)
def test_doctor_reports_every_prerequisite_found(eppkit_jaeger, eppkit_runtime):
    proc = subprocess.run(EPPKIT + ["doctor"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = ["envoy", "jaeger", "ext_proc protos", "otel protos", f"runtime {eppkit_runtime}"]  # its provider's answer
    if "images" in runtimes.get(eppkit_runtime).capabilities.builds:  # a container runtime's
        names += ["images", "image envoy", "image jaeger", "image services"]
    for name in names:
        assert re.search(rf"^{re.escape(name)}\s+ok\b", proc.stdout, re.M), proc.stdout
    assert "1.40.0" in proc.stdout


@CONTRACT  # the command on the runtime: its testbed, its trace, its run folder
def test_run_prints_answer_and_waterfall(eppkit_jaeger, eppkit_runtime, tmp_path):
    env = {**os.environ, "EPPKIT_RUNS": str(tmp_path)}
    proc = subprocess.run(EPPKIT + ["run", "--runtime", eppkit_runtime, "--time-to-first-token", "100", "--inter-token-latency", "5"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HTTP 200 from vllm-" in proc.stdout
    for span in ("client:client.request", "envoy:ingress", "vllm:llm_request", "vllm:vllm.prefill", "vllm:vllm.decode"):
        assert span in proc.stdout, proc.stdout
    saved = list(tmp_path.glob("*/trace-*.json"))
    assert saved, "the trace was not saved in the run folder"
    page = saved[0].with_suffix(".html")
    assert f"its waterfall, to open in a browser: {page}" in proc.stdout
    trace = rp.load_trace(saved[0])
    assert sorted(re.findall(r'data-span-id="([0-9a-f]+)"', page.read_text())) == sorted(s.span_id for s in trace.spans)


def test_run_of_a_refused_request_shows_its_partial_trace_and_where_it_stopped(eppkit_jaeger, eppkit_runtime, tmp_path):
    """A user filter that answers 401 itself: exit 1, the partial trace at once, and the place it stopped."""
    refuse = tmp_path / "refuse.lua"
    refuse.write_text('function envoy_on_request(h) h:respond({[":status"] = "401"}, "no key") end\n')
    env = {**os.environ, "EPPKIT_RUNS": str(tmp_path)}
    started = time.monotonic()
    proc = subprocess.run(EPPKIT + ["run", "--runtime", eppkit_runtime, "--mode", "ext_proc", "--lua-filter", str(refuse)],
                          capture_output=True, text=True, timeout=180, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^HTTP 401: ", proc.stdout, re.M), "no pod answered it: none is named"
    assert "HTTP 401: it never left Envoy (no upstream request)" in proc.stdout, proc.stdout
    assert "envoy:ingress" in proc.stdout and "trace incomplete" not in proc.stdout + proc.stderr, proc.stdout
    assert list(tmp_path.glob("*/trace-*.json")), "the partial trace was not saved"
    assert time.monotonic() - started < 60, "it waited for spans a refused request never has"


# The simulator in the mocks' places, through the command a person types: every picker mode, and pd.
# The kit's own picker modes: an external EPP needs a command of its own, and gaie-epp puts each pod
# on its own loopback address, which the simulator (bound to every interface) refuses.
SIM_CASES = [(m.name, "aggregated") for m in modes.all_modes() if m.pickers and not m.external] + [("sidecar", "pd")]


@pytest.mark.parametrize("mode, flow", cases(SIM_CASES, ("ext_proc", "aggregated"), why="the simulator in the runtime"),
                         ids=[f"{m}-{f}" for m, f in SIM_CASES])
def test_run_with_the_simulator_waits_for_every_span_of_the_kits_own_parts(eppkit_jaeger, eppkit_runtime, tmp_path,
                                                                           mode, flow):
    require_simulator()
    env = {**os.environ, "EPPKIT_RUNS": str(tmp_path)}
    proc = subprocess.run(EPPKIT + ["run", "--runtime", eppkit_runtime, "--backend", inference_sim.NAME, "--mode", mode,
                                    "--flow", flow, "--max-tokens", "5"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"backend: external: {inference_sim.NAME}" in proc.stdout
    assert re.search(r"HTTP 200 from vllm-(d)?\d: 't0 t1 t2 t3 t4 '", proc.stdout), proc.stdout
    trace = rp.load_trace(next(tmp_path.glob("*/trace-*.json")))
    # The check `eppkit run` made is the one expected_spans gives; here each kit span is named from the mode.
    kit = {(s.service, s.name) for s in trace.spans}
    assert set(modes.get(mode).spans) <= kit, proc.stdout
    if flow == "pd":
        assert {("pd-sidecar", "pd.request"), ("pd-sidecar", "pd.prefill"), ("pd-sidecar", "pd.decode")} <= kit
    assert not [s for s in trace.spans if s.service == "vllm"]  # the simulator traces nothing


# Every mode and every flow through the command a person types, each at least once.
UP_CASES = [
    ("direct", "aggregated"),
    ("ext_proc", "multipart"),
    ("sidecar", "epd"),
    ("lua-callout", "pd"),
    ("dynmod-callout", "ttft"),
]


@pytest.mark.parametrize("mode, flow", cases(UP_CASES, ("sidecar", "epd"), why="Ctrl-C stops every component"),
                         ids=[f"{m}-{f}" for m, f in UP_CASES])
def test_up_serves_until_ctrl_c_and_leaves_nothing_running(eppkit_jaeger, eppkit_runtime, tmp_path, mode, flow):
    proc, envoy_url, lines = start_up(["--runtime", eppkit_runtime, "--mode", mode, "--flow", flow,
                                       "--time-to-first-token", "20"],
                                      tmp_path, timeout_s=60)
    try:
        assert envoy_url, "".join(lines)
        resp = requests.post(envoy_url + "/v1/chat/completions", timeout=30,
                             json={"model": "mock-llm", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"], resp.text
        children = _kit_children(proc.pid, eppkit_runtime)
        assert len(children) >= 4, f"expected jaeger, 2 vLLMs and envoy ({eppkit_runtime}), got {children}"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) in (0, 130)
        time.sleep(0.2)
        if eppkit_runtime == "local":
            survivors = [pid for pid in children if procfs.alive(pid)]
        else:
            survivors = sorted(_kit_children(proc.pid, eppkit_runtime))
        assert survivors == [], f"left running after Ctrl-C: {survivors}"
    finally:
        if proc.poll() is None:
            proc.kill()


@CONTRACT  # what the runtime does when its owner dies: children with it, containers and Pods by its watchdog
def test_up_killed_with_sigkill_leaves_nothing_running(eppkit_jaeger, eppkit_runtime, tmp_path):
    proc, envoy_url, lines = start_up(["--runtime", eppkit_runtime, "--mode", "ext_proc"], tmp_path, timeout_s=60)
    try:
        assert envoy_url, "".join(lines)
        children = _kit_children(proc.pid, eppkit_runtime)
        assert len(children) >= 4, f"expected jaeger, 2 vLLMs, the EPP and envoy ({eppkit_runtime}), got {children}"
        proc.kill()  # SIGKILL: no handler, no atexit; what it started goes by the runtime's own means
        proc.wait(timeout=10)
        if eppkit_runtime == "local":
            left = lambda: [pid for pid in children if procfs.alive(pid)]  # noqa: E731
        else:
            left = lambda: sorted(_kit_children(proc.pid, eppkit_runtime))  # noqa: E731
        survivors = poll(left, until=lambda found: found == [], timeout_s=30, interval_s=0.5,
                         describe="what the killed `eppkit up` started, gone")
        assert survivors == []
    finally:
        if proc.poll() is None:
            proc.kill()


def _urls(lines: list[str]) -> dict[str, str]:
    """`eppkit up`'s URLs (Envoy, Jaeger API, OTLP, Trace UI) from what it printed."""
    found = {}
    for line in lines:
        for key, pattern in (("envoy", r"Envoy\s+(http://\S+)"), ("jaeger", r"Jaeger API\s+(http://[^/\s]+)"),
                             ("otlp", r"OTLP gRPC\s+(\S+)"), ("ui", r"Trace UI\s+(http://\S+)")):
            m = re.search(pattern, line)
            if m:
                found[key] = m.group(1)
    return found


def test_up_ui_shows_each_request_in_zipkin_within_5s_and_ctrl_c_stops_zipkin_too(eppkit_jaeger, eppkit_runtime,
                                                                                    tmp_path):
    java, why = zipkin.find_java()
    require(java is not None, why)
    require(zipkin.find_jar() is not None, "Zipkin's server jar is not cached. Run `eppkit bootstrap --ui`.")
    mode, flow = "ext_proc", "aggregated"
    proc, _, lines = start_up(["--ui", "--runtime", eppkit_runtime, "--mode", mode, "--time-to-first-token", "20"],
                              tmp_path, timeout_s=120)
    try:
        assert any("Ctrl-C to stop" in line for line in lines), "".join(lines)
        urls = _urls(lines)
        assert urls["ui"].endswith("/zipkin/"), urls
        zipkin_url = urls["ui"][: -len("/zipkin/")]
        java_pids = [pid for pid in procfs.children(proc.pid) if "java" in Path(f"/proc/{pid}/cmdline").read_bytes().decode()]
        assert len(java_pids) == 1, "Zipkin's server runs as a child of eppkit up"

        client = TracedClient(urls["envoy"], urls["otlp"], mode=mode, flow=flow)
        try:
            for _ in range(2):  # the second request shows that traces keep coming
                result = client.chat({"model": "mock-llm", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
                answered = time.monotonic()
                assert result.status == 200, result.body
                client.flush()
                jaeger = JaegerClient(urls["jaeger"]).wait_for_trace(result.trace_id, kit.expected(mode, flow))
                want = {s.span_id for s in jaeger.spans}
                shown: set = set()
                while time.monotonic() - answered < 5.0 and not want <= shown:
                    resp = requests.get(f"{zipkin_url}/zipkin/api/v2/trace/{result.trace_id}", timeout=5)
                    shown = {s["id"] for s in resp.json()} if resp.status_code == 200 else set()
                    time.sleep(0.1)
                took = time.monotonic() - answered
                assert want <= shown, f"Zipkin lacks {sorted(want - shown)} {took:.1f}s after the response"
                print(f"trace {result.trace_id} whole in Zipkin {took:.2f}s after the response")
        finally:
            client.close()
        _chromium.screenshot(f"{zipkin_url}/zipkin/traces/{result.trace_id}", tmp_path / "zipkin.png")

        children = _kit_children(proc.pid, eppkit_runtime)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) in (0, 130)
        time.sleep(0.2)
        assert not procfs.alive(java_pids[0]), "Zipkin's server outlived Ctrl-C"
        if eppkit_runtime == "local":
            survivors = [pid for pid in children if procfs.alive(pid)]
        else:
            survivors = sorted(_kit_children(proc.pid, eppkit_runtime))
        assert survivors == [], f"left running after Ctrl-C: {survivors}"
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{zipkin_url}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
