"""The plugin verdict's machinery without a testbed: its target and floor, its own registry, the floor's rule, the
exact bodies, the command line, the report."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from eppkit.observability.client import ClientResult

from eppkit.conformance import report as rp
from eppkit.conformance.checks import CHECKS
from eppkit.conformance.checks.registry import FAIL, PASS, PLUGIN_CHECKS, Check, Result
from eppkit.conformance import gallery
from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.plugin_checks.bodies import SIZES, exact_body
from eppkit.conformance.plugin_checks.hostile import cases
from eppkit.conformance.plugin_checks.refusals import reached_backend, refusal_problem, unclean
from eppkit.conformance.suite import run, selected
from eppkit.conformance.target import PluginTarget, Target
from eppkit.conformance.witness import Sent
from eppkit.gateway.hop import Hop
from eppkit.gateway.user_filters import HttpFilter, LuaFilter, lua_stat_prefix

pytestmark = pytest.mark.unit

LUA = LuaFilter(source="function envoy_on_request(h) end", position="after")


def test_a_plugin_target_is_its_filters_and_its_floor_the_same_testbed_without_them():
    target = PluginTarget(filters=(LUA,))
    bed, base = target.topology(floor=True), target.topology()
    assert (base.mode, base.filters, bed.filters) == ("direct", [LUA], [])
    assert (bed.mode, [v.name for v in bed.vllm], bed.envoy_version) == (base.mode, [v.name for v in base.vllm], None)
    assert target.replace(envoy_version="1.39.2").topology(floor=True).envoy_version == "1.39.2"
    described = target.describe()
    assert described["kind"] == "plugin" and "without the plugin's filters" in described["floor"]
    assert described["filters"] == ["Lua filter user.lua (inline) @after"]
    assert PluginTarget(filters=(LUA,), mode="ext_proc").topology(floor=True).mode == "ext_proc"  # any mode


def test_a_plugin_target_needs_a_filter_and_knows_the_directions_it_may_rewrite():
    with pytest.raises(ValueError, match="give --lua-filter"):
        PluginTarget()
    with pytest.raises(ValueError, match="choose request | response"):
        PluginTarget(filters=(LUA,), rewrites={"headers"})
    assert PluginTarget(filters=(LUA,)).has_lua()
    assert not PluginTarget(filters=(HttpFilter({"name": "x", "typed_config": {}}),)).has_lua()


def test_a_plugin_is_judged_by_its_own_checks_and_an_epp_never_by_them():
    plugin = [c.name for c in selected(kind="plugin")]
    # no-script-errors and no-module-errors after the checks of ordinary traffic, hostile-input-survives after them
    # (no check counts another's), streams-served last (a plugin that a cancelled stream takes down takes no other
    # check with it)
    assert plugin == ["streaming-preserved", "bodies-byte-for-byte", "refusals-are-clean", "cost-within-budget",
                      "memory-bounded", "no-script-errors", "no-module-errors", "hostile-input-survives",
                      "streams-served"]
    # (bodies-byte-for-byte is a rule of both, judged two ways: its EPP check and its plugin check are two entries)
    assert not set(selected(kind="plugin")) & set(selected())
    assert set(plugin) & set(CHECKS.names()) == {"bodies-byte-for-byte"}
    assert [c.name for c in selected(["no-script-errors"], kind="plugin")] == ["no-script-errors"]
    with pytest.raises(ValueError, match="unknown plugin check 'serves'"):
        selected(["serves"], kind="plugin")
    with pytest.raises(ValueError, match="unknown conformance check 'streaming-preserved'"):
        selected(["streaming-preserved"])
    for c in PLUGIN_CHECKS.all():  # cost is a should (a budget); memory is judged once over both protocols' requests
        assert c.doc and c.source and c.level == ("should" if c.name == "cost-within-budget" else "must")
        assert c.per_protocol == (c.name != "memory-bounded")


def test_the_floor_rule_is_max_5_ms_or_10_percent():
    assert floor.tolerance_ms(20) == 5 and floor.tolerance_ms(400) == 40
    assert floor.within(25, 20) and floor.within(15, 20) and not floor.within(25.1, 20)
    assert floor.within(440, 400) and not floor.within(441, 400)
    # a first token sooner than the floor's is the machine's noise; gaps that shrink are a changed pace
    assert floor.within(0, 20, later_only=True) and not floor.within(0, 20)
    line, problem = floor.compared("gap", 0.0, 20.0)
    assert problem == line and "allowed ±5.0 ms" in line
    assert floor.compared("ttft", 22.0, 20.0, later_only=True)[1] is None
    assert floor.median([3, 1, 2, 100]) == 2.5


def test_bodies_are_exactly_their_size():
    assert SIZES == (0, 1, 16383, 16385, 1048576)
    for size in SIZES:
        assert len(exact_body(size, "m")) == size
    assert json.loads(exact_body(16385, "m"))["messages"][0]["content"].strip("x") == ""
    assert exact_body(1, "m") == b" "


def test_the_command_line_names_a_plugin_with_plugin(tmp_path):
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    lua = gallery.path("noop")
    target = target_from(parser().parse_args(["conformance", "--plugin", "--lua-filter", str(lua),
                                              "--plugin-rewrites", "response"]))
    assert isinstance(target, PluginTarget) and target.mode == "direct" and target.rewrites == {"response"}
    assert target_from(parser().parse_args(["conformance", "--lua-filter", str(lua)])).kind == "epp"
    with pytest.raises(ValueError, match="--plugin-rewrites is for --plugin"):
        target_from(parser().parse_args(["conformance", "--plugin-rewrites", "request"]))
    with pytest.raises(ValueError, match="give --lua-filter"):
        target_from(parser().parse_args(["conformance", "--plugin"]))
    gate = target_from(parser().parse_args(["conformance", "--plugin", "--lua-filter", str(lua),
                                            "--plugin-let-through", "X-Tenant: acme", "--plugin-let-through",
                                            "x-key:k"]))
    assert gate.let_through_headers() == {"x-tenant": "acme", "x-key": "k"}
    assert gate.describe()["let_through"] == ["X-Tenant: acme", "x-key:k"]
    with pytest.raises(ValueError, match="--plugin-let-through is for --plugin"):
        target_from(parser().parse_args(["conformance", "--plugin-let-through", "x-tenant: a"]))
    with pytest.raises(ValueError, match="give 'name: value'"):
        PluginTarget(filters=(LUA,), let_through=("x-tenant",))


def test_the_gallery_ships_a_file_per_entry():
    assert "noop" in gallery.GALLERY and all(Path(gallery.path(name)).is_file() for name in gallery.LUA)
    source = (gallery.GO_MODULE / "main.go").read_text()
    assert all(f'"{name}":' in source for name in gallery.GO)  # each Go entry is a filter the module registers
    assert gallery.flag("holds_trailers") == f"--dynamic-module {gallery.GO_MODULE}:holds_trailers"
    assert gallery.flag("noop") == f"--lua-filter {gallery.HERE / 'noop.lua'}"
    module = gallery.plugin("panics_on_cancel")
    assert (module.module, module.filter) == ("gallery", "panics_on_cancel")
    with pytest.raises(ValueError, match="no gallery filter"):
        gallery.path("nope")


def test_each_lua_filter_counts_its_errors_under_a_prefix_of_its_own():
    assert lua_stat_prefix("user.lua.guard-2") == "user_lua_guard_2"


def test_a_plugin_report_says_it_judged_a_plugin_and_what_the_floor_was(tmp_path):
    answers = {"streaming-preserved": Result(FAIL, "the plugin changed the stream's pace", ["Envoy's access log"]),
               "bodies-byte-for-byte": Result(PASS, "every body passed byte for byte")}
    fake = [Check(c.name, c.title, c.category, c.level, c.source, c.order, lambda h, n=c.name: answers[n])
            for c in PLUGIN_CHECKS.all() if c.name in answers]
    report = run(PluginTarget(filters=(LUA,)), make_bed=lambda t: None, checks=fake, runtime="local")
    assert report["subject"]["kind"] == "plugin" and "epp" not in report and report["floor"]["rule"] == floor.RULE
    assert report["verdict"] == "does not conform" and report["hop"] == {}
    text = rp.text(report)
    assert text.startswith("eppkit conformance: the plugin Lua filter user.lua (inline) @after")
    assert "the floor: the same direct testbed without the plugin's filters" in text
    assert ET.fromstring(rp.junit(report)).get("name").startswith("eppkit conformance: the plugin ")
    assert "The floor:" in rp.write(report, tmp_path)["html"].read_text()
    assert rp.matrix([report, {**report, "versions": {"envoy": "1.39.2"}}])["subject"]["kind"] == "plugin"


def test_the_guide_lists_every_plugin_check_with_its_level():
    """bring-your-own-plugin.md's table of plugin checks is the registry's: same ids, same levels."""
    import re

    from tests.support.imports import ROOT

    text = (ROOT / "docs" / "bring-your-own-plugin.md").read_text().split("## Judging your plugin")[1]
    documented = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (must|should) \|", text, re.MULTILINE))
    assert documented == {check.name: check.level for check in PLUGIN_CHECKS.all()}


def refusal(status: int, body, content_type: str = "application/json", **hop) -> Sent:
    return Sent(ClientResult("t", status, {"content-type": content_type}, body=body),
                Hop({"code": status, "details": "lua_response", **hop}))


def test_a_refusal_is_clean_only_as_an_openai_error_that_reached_no_backend():
    assert unclean(refusal(403, {"error": {"message": "no tenant", "type": "auth_error", "code": 403}})) is None
    # the kit's Envoy rewrites a plain-text local reply into JSON: what the plugin wrote is read back out of it
    kit = {"error": {"message": "forbidden (lua_response)", "type": "envoy_local_reply", "code": 403}}
    assert "plain text 'forbidden' (Envoy's details lua_response" in unclean(refusal(403, kit))
    empty = {"error": {"message": " (lua_response)", "type": "envoy_local_reply", "code": 403}}
    assert "an empty body" in unclean(refusal(403, empty))
    assert "as text/plain" in unclean(refusal(403, "forbidden", "text/plain"))
    assert "without error.message and error.type" in unclean(refusal(401, {"detail": "no"}))
    assert "no answer" in unclean(Sent(ClientResult("t", 0, {}, error="reset"), None))
    assert reached_backend(refusal(403, {}, upstream="127.0.0.1:9")) == "Envoy sent it upstream to 127.0.0.1:9"
    assert reached_backend(refusal(403, {}, upstream="-")) is None
    both = refusal_problem("a chat", refusal(403, kit, upstream="127.0.0.1:9"))
    assert both.startswith("a chat: HTTP 403 with plain text")
    assert both.endswith("; Envoy sent it upstream to 127.0.0.1:9")


def test_the_hostile_cases_are_what_reaches_a_filter():
    """Envoy's codec refuses bad framing before any filter (tests/e2e/test_hostile_envoy.py): none is sent here."""
    sent = cases("m")
    assert len(sent) == len({what for what, _ in sent}) == 12
    framing = {"content-length", "transfer-encoding", "host", "connection"}
    for _, kwargs in sent:
        assert set(kwargs) <= {"raw_body", "headers", "content_type"}
        assert not framing & {k.lower() for k in kwargs.get("headers", {})}
        assert sum(len(k) + len(v) for k, v in kwargs.get("headers", {}).items()) < 60 * 1024  # Envoy's limit


def test_a_plugins_budget_is_what_it_may_add_at_p50_and_p99():
    from eppkit.conformance.checks.latency import Budget, CostBudget
    from eppkit.conformance.harness import Harness

    assert CostBudget.parse("") == CostBudget(1.0, None) and CostBudget.parse("p99=8ms") == CostBudget(1.0, 8.0)
    assert CostBudget.parse("p50=2,p99=10ms") == CostBudget(2.0, 10.0)
    assert CostBudget().allowed_ms(50, 3.0) == 1.0 and CostBudget(p99_ms=5.0).allowed_ms(99, 80.0) == 8.0  # or 10 %
    assert CostBudget().allowed_ms(99, 80.0) is None  # p99: reported, judged only when the budget names it
    with pytest.raises(ValueError, match="--budget 'decision=5ms': with --plugin give p50="):
        CostBudget.parse("decision=5ms")
    with pytest.raises(ValueError, match="give decision=<ms>, release=<ms> and p=<50-100>"):
        Budget.parse("p50=1ms")
    assert Budget.parse("decision=20ms,p=99") == Budget(20.0, 50.0, 99)
    assert isinstance(Harness(PluginTarget(filters=(LUA,)), lambda t: None).budget, CostBudget)
    assert isinstance(Harness(Target(), lambda t: None).budget, Budget)


def test_the_command_line_budget_of_a_plugin_is_its_cost(monkeypatch):
    from eppkit.cli import parser
    from eppkit.conformance import command
    from eppkit.conformance.checks.latency import CostBudget

    seen = {}
    monkeypatch.setattr(command, "envoy_versions", lambda v: (_ for _ in ()).throw(ValueError("stop here")))
    monkeypatch.setattr(CostBudget, "parse", classmethod(lambda cls, text: seen.setdefault("cost", text)))
    args = parser().parse_args(["conformance", "--plugin", "--lua-filter", gallery.path("noop"), "--budget", "p50=2ms"])
    assert command.main(args) == command.EXIT_CANNOT_RUN and seen == {"cost": "p50=2ms"}


def test_envoys_own_time_on_a_request_is_its_whole_time_less_the_backends():
    from eppkit.gateway.hop import Hop

    hop = Hop({"response_end_us": "9000", "upstream_start_us": "700", "upstream_end_us": "8200"})
    assert hop.gateway_ms() == 1.5  # 9 ms in all, 7.5 ms of them the backend's
    assert Hop({"response_end_us": "900", "upstream_start_us": "-"}).gateway_ms() is None


def test_the_memory_load_is_chats_streams_and_prompts_of_1_to_16_kib():
    from eppkit.conformance.plugin_checks import memory

    plan = memory._plan("m")
    assert [p.index for p in plan] == list(range(memory.REQUESTS))
    sizes = [len(json.dumps(p.body)) for p in plan]
    assert min(sizes) >= 1024 and max(sizes) < 16 * 1024 and len(set(sizes)) > 100  # the body, JSON and all, < 16 KiB
    assert sum(p.stream for p in plan) == memory.REQUESTS // 3 + (memory.REQUESTS % 3 > 1)
    assert memory.REQUESTS - memory.WARM_UP >= 1500 and memory.BOUND_MIB == 8.0
