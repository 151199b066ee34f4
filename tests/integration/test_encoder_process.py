"""The mock encoder as a process, sharing its encoder cache with a prefill mock."""

import json
import urllib.request

import pytest

from eppkit.components.process import ServiceProcess

pytestmark = pytest.mark.integration


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers, json.loads(r.read())


def test_encoder_then_prefill_sees_a_cache_hit(tmp_path):
    image = {"type": "image_url", "image_url": {"url": "http://127.0.0.1/cat.png"}}
    with ServiceProcess("eppkit.services.encoder", ["--instance", "e0", "--encode-latency", "5", "--ec-cache-dir", str(tmp_path)]) as enc, \
         ServiceProcess("eppkit.services.vllm", ["--role", "prefill", "--time-to-first-token", "5", "--ec-cache-dir", str(tmp_path)]) as p:
        headers, body = post(f"{enc.url}/v1/chat/completions",
                             {"model": "mock-llm", "messages": [{"role": "user", "content": [image]}], "max_tokens": 1})
        assert headers["x-inference-pod"] == "e0"
        (mm_hash,) = body["mm_hashes"]
        assert (tmp_path / f"{mm_hash}.json").exists()
        _, answer = post(f"{p.url}/v1/chat/completions",
                         {"model": "mock-llm", "messages": [{"role": "user", "content": [{"type": "text", "text": "what"}, image]}],
                          "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
        assert answer["kv_transfer_params"]["do_remote_prefill"] is True
