"""The prompt guard behind a real Envoy, checked on the responses and on the Jaeger traces.

Written against eppkit's public API only: the pytest plugin's fixtures, Topology, LuaFilter, TraceCheck.
"""

from pathlib import Path

import pytest

from eppkit import LuaFilter, Topology, TraceCheck, VllmSpec

pytestmark = pytest.mark.e2e

GUARD = Path(__file__).parents[1] / "prompt_guard.lua"
LIMIT = 50
TWO_PODS = [VllmSpec(name="pod-a"), VllmSpec(name="pod-b")]


def guard(position: str = "before") -> LuaFilter:
    return LuaFilter(path=GUARD, config={"max_prompt_tokens": LIMIT}, position=position)


def chat(words: int) -> dict:
    prompt = " ".join(["word"] * (words - 1)) + "?"  # words - 1 words and one question mark: `words` tokens
    return {"model": "mock-llm", "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]}


@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS, filters=[guard()])
def test_a_long_prompt_gets_an_openai_400_and_never_reaches_the_picker(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(chat(LIMIT + 1))
    assert result.status == 400
    assert result.body["error"]["code"] == "prompt_too_long"
    assert result.body["error"]["type"] == "BadRequestError"
    assert result.headers["x-prompt-tokens"] == str(LIMIT + 1)

    check = TraceCheck(eppkit_testbed.wait_for_trace(result, [("client", "client.request"), ("envoy", "ingress")]))
    assert check.one("ingress", "envoy").attributes["http.status_code"] == "400"
    check.absent("epp.pick")  # refused before the picker
    check.absent("llm_request")  # and nothing went upstream


@pytest.mark.eppkit_runtime_contract("a request through the testbed, where it runs")
@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS, filters=[guard()])
def test_an_accepted_request_is_tagged_and_served_by_the_picked_pod(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(chat(LIMIT))
    assert result.status == 200, result.body
    assert result.headers["x-prompt-tokens"] == str(LIMIT)

    check = TraceCheck(eppkit_testbed.wait_for_trace(result))
    pick = check.one("epp.pick", "epp")
    assert result.headers["x-inference-pod"] == pick.attributes["epp.endpoint.name"]
    # The model counts the role name and its colon too: the guard's estimate is the content's.
    assert check.one("llm_request", "vllm").attributes["gen_ai.usage.prompt_tokens"] == LIMIT + 2


@pytest.mark.parametrize("mode, decision", [("lua-callout", "callout.pick"), ("ext_proc", "epp.pick")])
def test_after_the_picker_the_decision_is_made_but_nothing_goes_upstream(eppkit_testbed_factory, mode, decision):
    bed = eppkit_testbed_factory(Topology(mode=mode, vllm=TWO_PODS, filters=[guard("after")]))
    result = bed.client().chat(chat(LIMIT * 2))
    assert result.status == 400
    check = TraceCheck(bed.wait_for_trace(result, [("client", "client.request"), ("envoy", "ingress"),
                                                   ("callout" if mode == "lua-callout" else "epp", decision)]))
    check.one(decision)
    check.absent("llm_request")
