"""A user's own filters in the real Envoy: Lua in every mode and flow, a Go module, a built .so, a
snippet, another Envoy version, and the clear error of a broken one.

The Lua test filter (plugins/chain.lua) reports where it ran: its name appended to the request's
x-user-chain, and the endpoint the picker had chosen when it ran (x-gateway-destination-endpoint),
both handed back on the response. Placed before the picker it sees no endpoint yet; after the
picker it sees the one that then serves the request. The Go module is the examples' tenant gate
(examples/go-tenant-gate/module, its own Go module): an unknown API key gets its 401 before the
picker runs, which the trace shows as a request with no decision and nothing upstream.
"""

from pathlib import Path

import pytest
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.builds import dynmod as dynmod_build
from eppkit.gateway import versions as envoy_versions
from eppkit.gateway.user_filters import DynamicModule, HttpFilter, LuaFilter, UserFilterError
from eppkit.topology import Topology, VllmSpec
from tests.support.contract import CONTRACT, cases

pytestmark = pytest.mark.e2e

PLUGINS = Path(__file__).parent / "plugins"
CHAIN = PLUGINS / "chain.lua"
TENANT_GATE = Path(__file__).parents[2] / "examples" / "go-tenant-gate" / "module"
TENANTS = {"tenants": {"sk-team-a": "team-a"}}
MODES = ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout")
PICKER_SPAN = {"ext_proc": "epp.pick", "sidecar": "epp.pick", "lua-callout": "callout.pick",
               "dynmod-callout": "callout.pick"}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "cGljdHVyZQ" * 16}}


def around_the_picker() -> list:
    # "before": inlined with its config (name before); "after": read by Envoy from the file (name plain).
    return [LuaFilter(path=CHAIN, config={"name": "before"}), LuaFilter(path=CHAIN, position="after")]


def chat(content="Which pod am I talking to?", **extra) -> dict:
    return {"model": "mock-llm", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": content}], **extra}


def send(bed, body, *, media_items=0, headers=None):
    client = bed.client()
    result = client.chat(body, headers=headers)
    assert result.status == 200, (result.status, result.body, result.error)
    rules = bed.expected_spans(media_items)
    trace = bed.wait_for_trace(result, [(r.service, r.name) for r in rules if not r.prefix],
                               min_spans=sum(r.count for r in rules), timeout_s=20)
    return result, TraceCheck(trace)


def assert_placed_around_the_picker(bed, result):
    h = result.headers
    assert h.get("x-user-before-chain") == "before"
    assert h.get("x-user-plain-chain") == "before,plain", "the after filter runs second, on the same request"
    assert h.get("x-user-before-endpoint") == "none", "before the picker nothing is chosen yet"
    chosen = h.get("x-user-plain-endpoint")
    if bed.topology.mode == "direct":
        assert chosen == "none"
    else:  # after the picker: what it chose (primary, then fallbacks), and the primary served
        by_address = {ep.address: ep.name for ep in bed.backends}
        primary, *fallbacks = chosen.split(",")
        assert all(a in by_address for a in (primary, *fallbacks)), (chosen, by_address)
        if bed.topology.flow == "aggregated":
            assert by_address[primary] == h.get("x-inference-pod")


@pytest.mark.parametrize("mode", cases(MODES, "ext_proc", why="the host's Lua files in Envoy's place"))
def test_user_lua_filters_before_and_after_the_picker_in_every_mode(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(Topology(mode=mode, vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")],
                                          filters=around_the_picker()))
    result, check = send(bed, chat())
    assert_placed_around_the_picker(bed, result)
    if mode in PICKER_SPAN:  # the decision happened, and before the upstream request
        upstream = next(s for s in check.all(service="envoy") if s.name.startswith("router "))
        check.before(check.one(PICKER_SPAN[mode]), upstream)


@pytest.mark.parametrize("mode, flow, media_items", [
    ("ext_proc", "pd", 0), ("lua-callout", "epd", 1), ("dynmod-callout", "ttft", 0), ("ext_proc", "multipart", 0),
])
def test_user_lua_filters_in_every_flow(eppkit_testbed_factory, mode, flow, media_items):
    bed = eppkit_testbed_factory(Topology(mode=mode, flow=flow, prefill=1, decode=1, encoders=1,
                                          latency=MockLatency(time_to_first_token=40, inter_token_latency=5),
                                          encode_latency=10,
                                          filters=around_the_picker()))
    content = [{"type": "text", "text": "What is in the picture?"}, IMAGE] if media_items else "Hello"
    result, check = send(bed, chat(content), media_items=media_items)
    assert_placed_around_the_picker(bed, result)
    assert len(result.tokens) == 4


@CONTRACT  # the host's module (and Envoy) in the runtime
def test_a_go_module_directory_gates_requests_before_the_picker(eppkit_testbed_factory):
    # dynmod-callout: the kit's Go module and the user's, two Go runtimes in one Envoy.
    gate = DynamicModule(TENANT_GATE, filter_name="tenant_gate", config=TENANTS)
    bed = eppkit_testbed_factory(Topology(mode="dynmod-callout", filters=[gate]))
    client = bed.client()
    refused = client.chat(chat())
    assert refused.status == 401
    assert refused.body["error"]["code"] == "invalid_api_key"
    check = TraceCheck(bed.wait_for_trace(refused, [("client", "client.request"), ("envoy", "ingress")]))
    check.absent("callout.pick")  # the gate answered before the picker ran
    check.absent("llm_request")
    assert check.one("ingress", "envoy").attributes["http.status_code"] == "401"

    result, check = send(bed, chat(), headers={"authorization": "Bearer sk-team-a"})
    assert result.headers.get("x-tenant") == "team-a"
    check.one("callout.pick")


@CONTRACT  # the host's module (and Envoy) in the runtime
def test_a_built_so_after_the_picker_and_a_snippet_filter(eppkit_testbed_factory):
    built = dynmod_build.build(lambda m: None, source_dir=TENANT_GATE, lib_name="libtenantgate.so")
    snippet = HttpFilter(
        "name: add_header\n"
        "typed_config:\n"
        "  '@type': type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation\n"
        "  mutations:\n"
        "    response_mutations:\n"
        "    - append: {header: {key: x-snippet, value: seen}}\n")
    bed = eppkit_testbed_factory(Topology(mode="ext_proc", filters=[
        DynamicModule(built, filter_name="tenant_gate", config=TENANTS, position="after"), snippet]))
    client = bed.client()
    refused = client.chat(chat())
    assert refused.status == 401
    check = TraceCheck(bed.wait_for_trace(refused, [("client", "client.request"), ("envoy", "ingress"),
                                                    ("epp", "epp.pick")]))
    check.absent("llm_request")  # picked (the gate comes after the picker), then refused

    result, _ = send(bed, chat(), headers={"authorization": "Bearer sk-team-a"})
    assert result.headers.get("x-tenant") == "team-a"
    assert result.headers.get("x-snippet") == "seen"


@CONTRACT  # the host's module (and Envoy) in the runtime
def test_another_envoy_version_runs_the_kit_module_and_a_user_filter(eppkit_testbed_factory):
    # The oldest version with dynamic modules from a file; on docker, that version's image.
    bed = eppkit_testbed_factory(Topology(mode="dynmod-callout", envoy_version="1.38.3", filters=around_the_picker()))
    assert bed.envoy_binary.version == "1.38.3"
    result, check = send(bed, chat())
    assert_placed_around_the_picker(bed, result)
    check.one("dynmod callout", "envoy")


# -- what a broken plugin gives: a clear error, before anything starts -------------------------------

def refused(factory, filters, **topology) -> str:
    with pytest.raises(UserFilterError) as err:
        factory(Topology(filters=filters, **topology))
    return str(err.value)


def test_a_lua_syntax_error_is_refused_with_envoy_words(eppkit_testbed_factory):
    message = refused(eppkit_testbed_factory, [LuaFilter(path=PLUGINS / "syntax_error.lua")])
    version = envoy_versions.resolve(None).version
    assert message.startswith(f"Lua filter {PLUGINS / 'syntax_error.lua'} does not load in Envoy {version}.")
    assert "script load error:" in message and ":2: unexpected symbol near '='" in message
    assert "Hint: a Lua syntax error" in message


def test_a_broken_module_and_a_missing_filter_name_are_refused_with_envoy_words(eppkit_testbed_factory, tmp_path):
    broken = tmp_path / "libbroken.so"
    broken.write_bytes(b"not an ELF file at all" * 100)
    message = refused(eppkit_testbed_factory, [DynamicModule(broken, filter_name="anything")])
    assert message.startswith(f"dynamic module broken ({broken}, filter_name anything) does not load in Envoy")
    assert "invalid ELF header" in message

    message = refused(eppkit_testbed_factory, [DynamicModule(TENANT_GATE, filter_name="no_such_filter")])
    assert "dynamic module tenantgate" in message and "filter_name no_such_filter" in message
    assert "failed to get plugin config factory" in message  # the Go SDK's words, logged by Envoy
    assert "Hint: the module has no filter by that filter_name" in message


def test_a_dynamic_module_on_an_envoy_without_them_names_the_first_version(eppkit_testbed_factory):
    message = refused(eppkit_testbed_factory, [DynamicModule(TENANT_GATE, filter_name="tenant_gate", config=TENANTS)],
                      envoy_version="1.37.0")
    assert "needs Envoy 1.38.0 or later for dynamic modules loaded from a file" in message
    assert "this testbed runs Envoy 1.37.0" in message
