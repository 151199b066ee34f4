"""The runtime contract: one request through every mode and flow, on every runtime.

The whole e2e suite runs on the first runtime (local); each other runtime runs what depends on it, the tests
marked ``eppkit_runtime_contract`` (docs/api.md, "What runs on which runtime"). This module is the part of
the contract that says the runtime starts every topology the kit has: each mode, in each flow it runs, serves
one request and leaves a complete trace.

| mode × flow (every pair the registries accept: 31) | expected |
|---|---|
| the request (streamed; images in epd) | HTTP 200, a pod named, the stream complete |
| its trace | every span the topology's mode, flow and backend emit, the client's span its one root, Envoy's ingress under it, the picker call (picker modes) under ingress holding the decision, which ends before the upstream starts |
"""

import sys

import pytest

from eppkit import TraceCheck, flows, modes
from eppkit.modes import external_epp
from eppkit.topology import Topology, VllmSpec

pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_runtime_contract("every topology starts and serves on this runtime")]

# The kit's own EPP started as an EPP of one's own would be.
OPTIONS = {external_epp.MODE.name: {"epp_command": f"{sys.executable} -m eppkit.services.epp --host 127.0.0.1 "
                                                   "--port {grpc_port} --endpoints {named_endpoints} "
                                                   "--pod-roles {pod_roles}"}}
IMAGES = 2
# The fewest components each flow runs with (one pod, one prefiller, one decoder, one encoder): every container
# of a flow's kinds still starts, in a third of the time of the defaults.
SMALLEST = {"vllm": [VllmSpec("vllm-0")], "prefill": 1, "decode": 1, "encoders": 1}
IMAGE = "data:image/png;base64,{}"


def pairs() -> list[tuple[str, str]]:
    """Every (mode, flow) the registries accept."""
    found = []
    for mode in modes.all_modes():
        for flow in flows.all_flows():
            try:
                modes.check(Topology(mode=mode.name, flow=flow.name, options=OPTIONS.get(mode.name, {})))
            except ValueError:
                continue
            found.append((mode.name, flow.name))
    return found


def body(flow: str) -> dict:
    content: object = "One request through this mode and flow."
    if flow == "epd":
        content = [{"type": "text", "text": content}] + [
            {"type": "image_url", "image_url": {"url": IMAGE.format(f"Y29udHJhY3Q{i}" * 16)}} for i in range(IMAGES)]
    return {"model": "mock-llm", "stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize("mode, flow", [pytest.param(m, f, marks=pytest.mark.eppkit_prepare(m)) for m, f in pairs()],
                         ids=[f"{m}-{f}" for m, f in pairs()])  # each case: what its mode builds, before the first test
def test_every_mode_serves_one_request_in_every_flow_with_a_complete_trace(eppkit_testbed_factory, mode, flow):
    bed = eppkit_testbed_factory(Topology(mode=mode, flow=flow, options=OPTIONS.get(mode, {}), **SMALLEST))
    client = bed.client()
    result = client.chat(body(flow))
    client.flush()
    assert result.status == 200, (result.status, result.body, result.error)
    assert result.events and result.events[-1] == {"done": True}, "the stream did not end with data: [DONE]"
    assert bed.served_pod(result.headers), f"no pod named in {dict(result.headers)}"
    trace = bed.wait_for_trace(result, bed.expected_spans(IMAGES if flow == "epd" else 0), timeout_s=20)
    TraceCheck(trace).request_path(bed.mode)


# -- --eppkit-keep-on-failure ----------------------------------------------------------------------------

KEEPS = '''
from eppkit.topology import Topology, VllmSpec

def test_fails_on_purpose(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology())
    assert bed.client().chat({"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}]}).status == 200
    assert False, "on purpose"
'''


def test_keep_on_failure_keeps_the_failed_tests_testbed_serving_until_ctrl_c_then_leaves_nothing(
        tmp_path, eppkit_runtime):
    """A user's session with ``--eppkit-keep-on-failure`` (never in CI: the inner session runs without CI=true):
    the failing test's testbed is described and still serves; Ctrl-C stops it, the session exits 1, no leak."""
    import signal
    import subprocess

    import requests

    from tests.support.inner import PYTEST, REPO_ROOT, session_env

    (tmp_path / "test_keeps.py").write_text(KEEPS)
    env = {k: v for k, v in session_env(tmp_path).items() if k != "CI"}
    proc = subprocess.Popen([*PYTEST, "-p", "no:xdist", "--rootdir", str(tmp_path), "--eppkit-keep-on-failure",
                             "--eppkit-runtime", eppkit_runtime, str(tmp_path / "test_keeps.py")],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        for line in proc.stdout:  # ends when the session ends: the test below stops it either way
            lines.append(line)
            if "Ctrl-C stops it" in line:
                break
        described = "".join(lines)
        assert "failed; its testbed is still running" in described, described
        envoy = next(line.split()[1] for line in lines if line.strip().startswith("Envoy "))
        answer = requests.post(f"{envoy}/v1/chat/completions", timeout=10,
                               json={"model": "mock-llm", "messages": [{"role": "user", "content": "still there?"}]})
        assert answer.status_code == 200, answer.text
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = described + rest
    assert proc.returncode == 1, out
    assert "stopped after the first failure (--eppkit-keep-on-failure)" in out, out
    assert "LEAK" not in out, out
    with pytest.raises(requests.ConnectionError):
        requests.get(envoy, timeout=5)
