"""Our server behind eppkit's Envoy and pickers, as a backend of its own (echo_server/backend.py)."""

import subprocess
import sys

import pytest

from eppkit import TraceCheck, VllmSpec

pytestmark = pytest.mark.e2e

TWO_PODS = [VllmSpec(name="pod-a"), VllmSpec(name="pod-b")]
CHAT = {"model": "mock-llm", "messages": [{"role": "user", "content": "one two three"}]}


@pytest.mark.eppkit_runtime_contract("a request through the testbed, where it runs")
@pytest.mark.eppkit_topology(mode="ext_proc", backend="echo-server", vllm=TWO_PODS)
def test_the_picker_routes_to_our_servers_and_the_answer_is_theirs(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(CHAT)
    assert result.status == 200, result.body
    assert result.body["choices"][0]["message"]["content"] == "three two one"

    pick = TraceCheck(eppkit_testbed.wait_for_trace(result)).one("epp.pick", "epp")
    assert result.headers["x-inference-pod"] == pick.attributes["epp.endpoint.name"]


@pytest.mark.eppkit_topology(mode="lua-callout", backend="echo-server", vllm=TWO_PODS)
def test_a_stream_through_a_callout_mode_gets_every_word(eppkit_client):
    result = eppkit_client.chat({**CHAT, "stream": True})
    assert result.status == 200 and "".join(result.tokens).split() == ["three", "two", "one"]


def test_the_cli_knows_it_and_refuses_what_it_cannot_serve():
    run = [sys.executable, "-m", "eppkit", "run", "--backend", "echo-server", "--mode", "direct"]
    served = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert served.returncode == 0 and "external: echo-server" in served.stdout + served.stderr, served.stderr
    refused = subprocess.run([*run, "--flow", "pd"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "it has no prefill/decode handshake" in refused.stderr, refused.stderr
