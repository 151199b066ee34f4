"""Go dynamic modules in the kit's Envoy (eppkit.gateway.go_modules): the GODEBUG it gets whenever its config loads a
module, Go's own words when a module aborts it (at validation and at start), and the no-module-errors check's reading
of Envoy's log. No real Envoy runs here: a fake subprocess and a fake launcher stand in
(tests/e2e/test_prebuilt_go_module.py and tests/e2e/test_plugin_gallery.py run the real ones)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from eppkit.conformance.checks.registry import PLUGIN_CHECKS
from eppkit.conformance.plugin_checks import module_errors
from eppkit.conformance.target import PluginTarget
from eppkit.gateway import config as envoy_config
from eppkit.gateway import go_modules, user_filters
from eppkit.gateway import process as envoy_process
from eppkit.gateway.user_filters import DynamicModule, HttpFilter, LuaFilter, UserFilterError
from eppkit.gateway.versions import EnvoyBinary

pytestmark = pytest.mark.unit

MODULE = {"name": "gate", "typed_config": {
    "@type": user_filters.DYNMOD_TYPE, "filter_name": "tenant_gate",
    "dynamic_module_config": {"module": {"local": {"filename": "/m/libgate.so"}}, "do_not_close": True}}}
LUA = {"name": "lua", "typed_config": {"@type": user_filters.LUA_TYPE, "default_source_code": {"inline_string": ""}}}

# What Envoy 1.40.0 wrote when `envoy --mode validate` loaded a Go module built with a plain `go build
# -buildmode=c-shared` and no GODEBUG (shortened: the SDK's path, the rest of both backtraces).
CGO_PANIC = """\
[2026-12-06 20:08:03.222][17677][warning][dynamic_modules] \
[source/extensions/dynamic_modules/posix/dynamic_modules.cc:119] Dynamic module ABI version v0.1.0 is deprecated.
panic: runtime error: sdk/go/abi/internal.go:1491: result of Go function \
envoy_dynamic_module_on_http_filter_config_new called from cgo is unpinned Go unsafe pointer or points to \
unpinned Go unsafe pointer

goroutine 17 [running, locked to thread]:
panic({0x7fadea7b8240?, 0x2c5f42626050?})
\t/usr/local/go/src/runtime/panic.go:879 +0x16f
runtime.cgoCheckArg(0x7fadea7b0d20, 0x2c5f42612018, 0x68?, 0x0, 0x1)
\t/usr/local/go/src/runtime/cgocall.go:739 +0x2ae
runtime.cgoCheckResult({0x7fadea7b0d20, 0x2c5f42612018})
\t/usr/local/go/src/runtime/cgocall.go:829 +0x45
_cgoexp_0239f516b2d1_envoy_dynamic_module_on_http_filter_config_new(0x7fffed3c0160)
\tsdk/go/abi/internal.go:1491 +0x66
[2026-12-06 20:08:03.230][17677][critical][backtrace] [./source/server/backtrace.h:173] Caught Aborted, \
suspect faulting address 0x4482
[2026-12-06 20:08:03.230][17677][critical][backtrace] [./source/server/backtrace.h:165] #3: runtime.cgoCheckArg [0x7f81]
"""


def test_godebug_gets_cgocheck_off_and_keeps_every_other_setting():
    assert go_modules.godebug(None) == go_modules.godebug("") == "cgocheck=0"
    assert go_modules.godebug("http2debug=1,madvdontneed=1") == "http2debug=1,madvdontneed=1,cgocheck=0"
    # a cgocheck someone set is theirs (Go's check finds real pointer bugs): kept, and the refusal's hint says so
    assert go_modules.godebug("cgocheck=1,x=2") == "cgocheck=1,x=2"


def test_envoy_env_has_godebug_only_when_its_config_loads_a_dynamic_module():
    with_module = {"static_resources": {"listeners": [{"filters": [MODULE, LUA]}]}}
    assert go_modules.modules(with_module) == ["/m/libgate.so (filter tenant_gate)"]
    assert go_modules.envoy_env(with_module, {"A": "1"}, inherited={}) == {"A": "1", "GODEBUG": "cgocheck=0"}
    assert go_modules.envoy_env({"http_filters": [LUA]}, {"A": "1"}, inherited={"GODEBUG": "x=1"}) == {"A": "1"}
    # merged into the GODEBUG Envoy would have had: the testbed's, else this process's (a local Envoy inherits it)
    assert go_modules.envoy_env(with_module, {}, inherited={"GODEBUG": "x=1"})["GODEBUG"] == "x=1,cgocheck=0"
    assert go_modules.envoy_env(with_module, {"GODEBUG": "y=2"}, inherited={"GODEBUG": "x=1"})["GODEBUG"] == \
        "y=2,cgocheck=0"
    by_name = {"dynamic_module_config": {"name": "gate"}, "filter_name": "f"}
    assert go_modules.modules([by_name]) == ["gate (filter f)"]


def test_the_kit_module_default_and_envoy_godebug_are_one_setting():
    from eppkit.builds import dynmod

    assert dynmod.LDFLAGS == f"-X=runtime.godebugDefault={go_modules.CGOCHECK_OFF}"


class RecordingLauncher:
    """A launcher that records what Envoy would get (every runtime's launcher gets it from Envoy the same way)."""

    def __init__(self):
        self.env = None

    def make(self, name, args, log_path, *, env=None, mounts=()):
        self.env = env
        return SimpleNamespace(log_path=log_path)


def test_the_testbed_envoy_gets_godebug_on_every_runtime_when_it_loads_a_module(tmp_path, monkeypatch):
    monkeypatch.delenv("GODEBUG", raising=False)
    config = tmp_path / "envoy.yaml"
    for filters, expected in (([MODULE], {"K": "v", "GODEBUG": "cgocheck=0"}), ([LUA], {"K": "v"})):
        config.write_text(json.dumps({"http_filters": filters}))
        launcher = RecordingLauncher()
        envoy_process.Envoy(config, tmp_path / "envoy.log", 1, launcher, env={"K": "v"})
        assert launcher.env == expected


def test_validation_runs_envoy_with_the_godebug_the_testbed_envoy_gets(tmp_path, monkeypatch):
    def envoy_says_its_godebug(argv, env, **_):  # an 'envoy --mode validate' that refuses, saying its GODEBUG
        return SimpleNamespace(returncode=1, stderr="", stdout="[2026-01-01 00:00:00.000][1][critical][main] [x.cc:1] "
                               f"error initializing configuration: GODEBUG=[{env.get('GODEBUG', '')}]")

    monkeypatch.setattr(envoy_config.subprocess, "run", envoy_says_its_godebug)
    monkeypatch.setenv("GODEBUG", "x=1")
    envoy = EnvoyBinary(tmp_path / "envoy", "1.40.0")
    said = []
    for entry, env in ((MODULE, None), (MODULE, {"GODEBUG": "cgocheck=1"}), (LUA, None)):
        with pytest.raises(envoy_config.EnvoyConfigInvalid) as err:
            envoy_config.check_filters([entry], envoy, tmp_path / "check.yaml", env=env)
        said.append(err.value.envoy_says.rsplit("GODEBUG=", 1)[1])
    assert said == ["[x=1,cgocheck=0]", "[cgocheck=1]", "[x=1]"]


def test_a_go_panic_is_said_in_go_words_instead_of_envoy_backtrace():
    said = envoy_config.envoy_messages(CGO_PANIC).splitlines()
    assert said[0].startswith("[warning][dynamic_modules]")
    assert said[1].startswith("panic: runtime error: ") and "unpinned Go unsafe pointer" in said[1]
    assert said[2:] == ["at runtime.cgoCheckArg (/usr/local/go/src/runtime/cgocall.go:739)",
                        "at runtime.cgoCheckResult (/usr/local/go/src/runtime/cgocall.go:829)",
                        "at _cgoexp_0239f516b2d1_envoy_dynamic_module_on_http_filter_config_new "
                        "(sdk/go/abi/internal.go:1491)"]
    assert go_modules.go_panic("[2026-01-01][1][critical][main] panic: not Go's\n") == []


def test_a_module_refused_for_the_cgo_check_is_named_with_its_panic_and_the_fix(tmp_path, monkeypatch):
    def refuse(binary, path, env=None):
        raise envoy_config.EnvoyConfigInvalid("envoy rejected", envoy_config.envoy_messages(CGO_PANIC))

    monkeypatch.setattr(envoy_config, "validate", refuse)
    so = tmp_path / "libllmproxy.so"
    so.write_bytes(b"\x7fELF")
    with pytest.raises(UserFilterError) as err:
        user_filters.prepare([DynamicModule(so, "llm_proxy")], EnvoyBinary(Path("/e"), "1.39.3"), tmp_path)
    message = str(err.value)
    assert message.startswith(f"dynamic module llmproxy ({so}, filter_name llm_proxy) does not load in Envoy 1.39.3.")
    assert "\n  panic: runtime error: " in message and "Caught Aborted" not in message
    assert message.rsplit("\nHint: ", 1)[1] == go_modules.CGO_HINT
    assert "GODEBUG=cgocheck=0" in go_modules.CGO_HINT and "-ldflags=-X=runtime.godebugDefault" in go_modules.CGO_HINT


def test_an_envoy_a_module_aborts_at_start_names_the_module_and_its_panic():
    config = {"http_filters": [MODULE]}
    message = go_modules.aborted(CGO_PANIC, config)
    assert message.startswith("Envoy aborted as it loaded its dynamic modules (/m/libgate.so (filter tenant_gate)): "
                              "a Go module panicked. Go says:\n  panic: runtime error: ")
    assert message.endswith(f"\nHint: {go_modules.CGO_HINT}")
    assert go_modules.aborted(CGO_PANIC, {"http_filters": [LUA]}) is None
    assert go_modules.aborted("[...][critical][main] bind failed\n", config) is None
    nil = "panic: runtime error: invalid memory address or nil pointer dereference\n\ngoroutine 9 [running]:\n" \
          "main.(*gate).OnRequestHeaders(0xc0)\n\t/src/main.go:42 +0x1d\n"
    assert go_modules.aborted(nil, config).endswith("at main.(*gate).OnRequestHeaders (/src/main.go:42)")


# -- no-module-errors ---------------------------------------------------------------------------------------------

def bed(log: str):
    return SimpleNamespace(processes=lambda: {"envoy": SimpleNamespace(read_log=lambda: log)})


LINE = ("[2026-12-06 20:10:00.001][9][error][dynamic_modules] [source/extensions/dynamic_modules/abi_impl.cc:57] "
        "{}")


def test_no_module_errors_reads_a_module_error_lines_less_the_floor_own():
    plugin = "\n".join([LINE.format("gate: no x-tenant on POST /v1/chat/completions"), LINE.format("mode's own"),
                        LINE.replace("[error]", "[warning]").format("a warning"),
                        "[2026-12-06 20:10:00.002][9][error][lua] [x] script log: not a module's"])
    floor = LINE.format("mode's own")
    assert [module_errors._said(line) for line in module_errors.plugin_error_lines(bed(plugin), bed(floor))] == [
        "[error][dynamic_modules] [source/extensions/dynamic_modules/abi_impl.cc:57] gate: no x-tenant on POST "
        "/v1/chat/completions"]
    assert module_errors._message(LINE.replace("[error]", "[critical]").format("x [y] z")) == "x [y] z"


def test_no_module_errors_applies_where_a_dynamic_module_is_in_the_chain(tmp_path):
    check = PLUGIN_CHECKS.get("no-module-errors")
    lua = LuaFilter(source="function envoy_on_request(h) end")
    assert "no dynamic module in the chain" in check.not_declared(PluginTarget(filters=(lua,)))
    assert check.not_declared(PluginTarget(filters=(DynamicModule(tmp_path / "libgate.so"),))) is None
    assert check.not_declared(PluginTarget(filters=(HttpFilter(MODULE),))) is None  # a snippet that loads one
    assert check.not_declared(PluginTarget(filters=(lua,), mode="dynmod-callout")) is None  # the mode's own module
