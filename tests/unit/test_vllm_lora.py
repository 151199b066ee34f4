"""The mock's LoRA adapters as vLLM serves them: --lora-modules and --max-loras, adapters in /v1/models, a request
on an adapter served by it, loaded on demand in place of the least recently used idle one, and
vllm:lora_requests_info as vLLM writes it (read back by the one parser the picker and the check use)."""

import asyncio

import pytest
from eppkit.services.openai_server.lora_info import LoraInfo
from eppkit.services.vllm.config import ConfigError, VllmConfig
from eppkit.services.vllm.lora import LoraAdapters, parse_modules
from eppkit.services.vllm.testing import chat_body, in_process, make_mock

pytestmark = pytest.mark.unit

ADAPTERS = ["sql-lora=/adapters/sql", "chat-lora=/adapters/chat", "code-lora=/adapters/code"]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("items, error", [
    (["sql"], "is not name=path"),  # vLLM's form is name=path
    (["=x"], "is not name=path"),
    (['{"name": "a"}'], "is not name=path"),  # the JSON form needs its path
    (["a=x", "a=y"], "names 'a' twice"),
])
def test_lora_modules_that_cannot_work_are_refused(items, error):
    with pytest.raises(ValueError, match=error):
        parse_modules(items)


def test_lora_modules_take_vllms_two_forms():
    assert parse_modules(["a=/x", '{"name": "b", "path": "/y", "base_model_name": "m"}']) == {"a": "/x", "b": "/y"}


def test_config_refuses_an_adapter_named_like_the_model_and_no_slot():
    with pytest.raises(ConfigError, match="also a served model name"):
        VllmConfig(lora_modules=["mock-llm=/x"]).validate()
    with pytest.raises(ConfigError, match="--max-loras must be at least 1"):
        VllmConfig(lora_modules=ADAPTERS, max_loras=0).validate()


def test_the_command_line_takes_vllms_flags():
    import argparse

    from eppkit.services.vllm.config import add_args, from_args

    parser = argparse.ArgumentParser()
    add_args(parser)
    args = parser.parse_args(["--enable-lora", "--lora-modules", *ADAPTERS, "--max-loras", "2"])
    config = from_args(args)
    assert config.lora_modules == ADAPTERS and config.max_loras == 2


def test_adapters_are_listed_with_the_base_model_as_parent_and_serve_requests():
    mock, _ = make_mock(lora_modules=ADAPTERS, time_to_first_token=0, inter_token_latency=0)

    async def go():
        async with in_process(mock.make_app()) as c:
            models = await (await c.get("/v1/models")).json()
            served = await c.post("/v1/chat/completions", json=chat_body(model="sql-lora", max_tokens=2))
            unknown = await c.post("/v1/chat/completions", json=chat_body(model="nope-lora", max_tokens=2))
            return models, served.status, await served.json(), unknown.status

    models, status, body, unknown = run(go())
    cards = {m["id"]: m for m in models["data"]}
    assert list(cards) == ["mock-llm", "sql-lora", "chat-lora", "code-lora"]
    assert cards["sql-lora"]["parent"] == "mock-llm" and cards["sql-lora"]["root"] == "/adapters/sql"
    assert cards["mock-llm"]["parent"] is None
    assert status == 200 and body["model"] == "sql-lora"
    assert unknown == 404


def test_an_adapter_loads_on_demand_in_place_of_the_least_recently_used_idle_one():
    async def go():
        a = LoraAdapters(parse_modules(ADAPTERS), max_loras=2)
        for name in ("sql-lora", "chat-lora", "sql-lora", "code-lora"):  # chat-lora is then the least recently used
            use = a.use(name)
            await use.load()
            use.run()
            use.close()
        return a

    a = run(go())
    assert list(a.loaded) == ["sql-lora", "code-lora"]
    assert a.loads == 3 and a.evictions == 1


async def _one_slot_busy_and_one_waiting() -> tuple[LoraAdapters, object, object, asyncio.Task]:
    """One slot, sql-lora running in it, and chat-lora's load waiting for it: (adapters, the busy use, the waiting
    use, its load's task)."""
    a = LoraAdapters(parse_modules(ADAPTERS), max_loras=1)
    busy = a.use("sql-lora")
    await busy.load()
    busy.run()
    other = a.use("chat-lora")
    waiting = asyncio.create_task(other.load())
    await asyncio.sleep(0.01)
    return a, busy, other, waiting


def test_a_request_waits_while_every_slot_has_requests_running_then_loads():
    async def go():
        a, busy, other, waiting = await _one_slot_busy_and_one_waiting()
        during = (a.info(), a.blocked, waiting.done())
        busy.close()  # sql-lora is idle now: chat-lora takes its slot
        await asyncio.wait_for(waiting, 1)
        other.run()
        after = a.info()
        other.close()
        return during, after, list(a.loaded)

    (info, blocked, done), after, loaded = run(go())
    assert info == LoraInfo(running=("sql-lora",), waiting=("chat-lora",), max_lora=1)
    assert blocked == 1 and not done
    assert after == LoraInfo(running=("chat-lora",), waiting=(), max_lora=1)
    assert loaded == ["chat-lora"]


def test_a_cancelled_wait_gives_back_what_it_counted():
    async def go():
        a, _, other, task = await _one_slot_busy_and_one_waiting()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other.close()
        return a

    a = run(go())
    assert a.blocked == 0 and not a.waiting and a.info().running == ("sql-lora",)


def test_metrics_show_the_running_adapter_as_vllm_does_and_the_latest_series_wins():
    mock, _ = make_mock(lora_modules=ADAPTERS, max_loras=2, time_to_first_token=0, inter_token_latency=200)

    async def go():
        async with in_process(mock.make_app()) as c:
            idle = await (await c.get("/metrics")).text()
            request = asyncio.create_task(c.post("/v1/chat/completions",
                                                 json=chat_body(model="code-lora", max_tokens=3)))
            await asyncio.sleep(0.1)
            during = await (await c.get("/metrics")).text()
            await request
            after = await (await c.get("/metrics")).text()
            return idle, during, after

    idle, during, after = run(go())
    assert 'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""}' in idle
    assert LoraInfo.parse(during) == LoraInfo(running=("code-lora",), max_lora=2)
    # the state of the scrape before stays a series of its own, as on vLLM; the latest is the current one
    assert 'running_lora_adapters="code-lora"' in after
    assert LoraInfo.parse(after) == LoraInfo(max_lora=2)


def test_without_adapters_the_family_is_there_empty():
    mock, _ = make_mock()

    async def go():
        async with in_process(mock.make_app()) as c:
            return await (await c.get("/metrics")).text()

    assert LoraInfo.parse(run(go())) == LoraInfo(max_lora=0)
    assert LoraInfo.parse("vllm:num_requests_running 1\n") is None


def test_room_is_running_and_waiting_adapters_under_max_lora():
    assert LoraInfo(running=("a",), max_lora=2).has_room
    assert not LoraInfo(running=("a",), waiting=("b",), max_lora=2).has_room
