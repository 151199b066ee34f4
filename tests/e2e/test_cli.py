"""The `eppkit` command as a person uses it: doctor, run, and up until Ctrl-C with nothing left
behind — on the runtime under test (`--eppkit-runtime local` or `docker`)."""

import os
import re
import signal
import subprocess
import time

import pytest
import requests

from _cli import EPPKIT, REPO_ROOT, start_up
from eppkit import procfs

pytestmark = pytest.mark.e2e


def _kit_children(pid: int, runtime: str) -> set:
    """What `eppkit up` (process ``pid``) runs: its child processes, or its containers."""
    if runtime == "local":
        return procfs.children(pid)
    from eppkit import containers

    client = containers.docker_client()
    try:
        return {c.name for c in client.containers.list(all=True, filters={"label": f"eppkit.owner-pid={pid}"})}
    finally:
        client.close()


def test_doctor_reports_every_prerequisite_found(eppkit_jaeger, eppkit_runtime):
    proc = subprocess.run(EPPKIT + ["doctor"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = ["envoy", "jaeger", "ext_proc protos", "otel protos"]
    if eppkit_runtime == "docker":
        names += ["docker", "image envoy", "image jaeger", "image services"]
    for name in names:
        assert re.search(rf"^{re.escape(name)}\s+ok\b", proc.stdout, re.M), proc.stdout
    assert "1.40.0" in proc.stdout


def test_run_prints_answer_and_waterfall(eppkit_jaeger, eppkit_runtime, tmp_path):
    env = {**os.environ, "EPPKIT_RUNS": str(tmp_path)}
    proc = subprocess.run(EPPKIT + ["run", "--runtime", eppkit_runtime, "--time-to-first-token", "100", "--inter-token-latency", "5"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HTTP 200 from vllm-" in proc.stdout
    for span in ("client:client.request", "envoy:ingress", "vllm:llm_request", "vllm:vllm.prefill", "vllm:vllm.decode"):
        assert span in proc.stdout, proc.stdout
    assert list(tmp_path.glob("*/trace-*.json")), "the trace was not saved in the run folder"


# Every mode and every flow through the command a person types, each at least once.
UP_CASES = [
    ("direct", "aggregated"),
    ("ext_proc", "multipart"),
    ("sidecar", "epd"),
    ("lua-callout", "pd"),
    ("dynmod-callout", "ttft"),
]


@pytest.mark.parametrize("mode, flow", UP_CASES, ids=[f"{m}-{f}" for m, f in UP_CASES])
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
