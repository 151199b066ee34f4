"""Envoy's own error replies reach the client as OpenAI-style JSON, and Envoy stays healthy."""

import pytest
import requests
from eppkit.services.vllm.config import MockLatency

from eppkit.topology import Topology, VllmSpec
from tests.support.contract import CONTRACT

pytestmark = pytest.mark.e2e


@CONTRACT  # a backend stopped and started again
def test_backend_down_gives_openai_style_503_and_envoy_recovers(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(mode="direct", vllm=[VllmSpec("vllm-0")], latency=MockLatency(time_to_first_token=10)))
    body = {"model": "mock-llm", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    bed.services["vllm-0"].process.kill()

    resp = requests.post(bed.envoy_url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 503
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert error["type"] == "envoy_local_reply" and error["code"] == 503
    assert "upstream" in error["message"]
    assert requests.get(bed.envoy_admin_url + "/ready", timeout=5).text.strip() == "LIVE"
