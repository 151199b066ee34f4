"""The fake Kubernetes API an upstream EPP reads its pool from (in process, no EPP)."""

import asyncio
import json

import pytest
from eppkit.services.fake_kube.__main__ import read_args
from eppkit.services.fake_kube.app import FakeKube, build_app
from eppkit.services.vllm.testing import in_process

pytestmark = pytest.mark.unit

ARGS = ["--pool-name", "pool", "--target-port", "18000", "--pod", "vllm-0=127.0.0.2", "--pod", "vllm-1=127.0.0.3"]


def run(check):
    async def go():
        async with in_process(build_app(FakeKube(read_args(ARGS)))) as client:
            return await check(client)
    return asyncio.run(go())


def test_discovery_names_pods_and_inferencepools():
    async def check(client):
        core = await (await client.get("/api/v1")).json()
        inference = await (await client.get("/apis/inference.networking.k8s.io/v1")).json()
        health = (await client.get("/health")).status
        return core, inference, health
    core, inference, health = run(check)
    assert "pods" in [r["name"] for r in core["resources"]]
    assert "inferencepools" in [r["name"] for r in inference["resources"]]
    assert health == 200


def test_a_watch_list_sends_every_pod_then_the_initial_events_end_bookmark():
    async def check(client):
        resp = await client.get("/api/v1/namespaces/default/pods", params={
            "watch": "true", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "1"})
        events = [json.loads(line) for line in (await resp.text()).splitlines() if line.strip()]
        return resp.status, events
    status, events = run(check)
    assert status == 200
    added = [(e["object"]["metadata"]["name"], e["object"]["status"]["podIP"]) for e in events if e["type"] == "ADDED"]
    assert added == [("vllm-0", "127.0.0.2"), ("vllm-1", "127.0.0.3")]
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks[0]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"


def test_the_pool_selects_the_pods_on_one_shared_target_port():
    async def check(client):
        return await (await client.get("/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools/pool")).json()
    pool = run(check)
    assert pool["kind"] == "InferencePool"
    assert pool["spec"]["targetPorts"] == [{"number": 18000}]
    assert pool["spec"]["selector"]["matchLabels"] == {"app": "vllm"}
