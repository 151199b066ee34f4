"""The verdict engine's shape (docs/architecture.md, The verdict engine): one Subject both targets implement, checks
typed by it, no probe of a target or a harness."""

from __future__ import annotations

import re

import pytest
from eppkit.observability.client import ClientResult

from eppkit.conformance.harness import Harness
from eppkit.conformance.subject import Subject
from eppkit.conformance.target import PluginTarget, Target
from eppkit.conformance.witness import Sent
from eppkit.gateway.hop import Hop
from eppkit.gateway.user_filters import LuaFilter
from tests.support.imports import ROOT

pytestmark = pytest.mark.unit

LUA = LuaFilter(source="function envoy_on_request(h) end", position="after")


@pytest.mark.parametrize("subject", [Target("ext_proc"), PluginTarget(filters=(LUA,))], ids=["epp", "plugin"])
def test_both_targets_are_subjects(subject):
    assert isinstance(subject, Subject)
    assert subject.kind in ("epp", "plugin") and subject.describe()["kind"] == subject.kind
    assert isinstance(subject.let_through_headers(), dict)
    assert subject.replace(envoy_version="1.39.2").topology().envoy_version == "1.39.2"



def test_a_check_judges_the_subject_of_the_package_it_is_declared_in_and_elsewhere_says_which():
    from eppkit.conformance import plugin_checks  # noqa: F401  (registered)
    from eppkit.conformance.checks import CHECKS
    from eppkit.conformance.registry import HOMES, PLUGIN_CHECKS, check

    assert all(c.run.__module__.startswith("eppkit.conformance.checks.") for c in CHECKS.all())
    assert all(c.run.__module__.startswith("eppkit.conformance.plugin_checks.") for c in PLUGIN_CHECKS.all())
    assert set(HOMES.values()) == {"epp", "plugin"}

    def mine(h):
        """A rule of an outside package."""

    with pytest.raises(ValueError, match=r"say which subject it judges, check\(\.\.\., subject='epp' or 'plugin'\)"):
        check("outside-rule", "an outside rule", category="protocol")(mine)
    mine.__module__ = "eppkit.conformance.plugin_checks.mine"
    with pytest.raises(ValueError, match=r"among the plugin checks \(.*plugin_checks.mine\), not subject='epp'"):
        check("outside-rule", "an outside rule", category="protocol", subject="epp")(mine)
    assert "outside-rule" not in CHECKS.names() + PLUGIN_CHECKS.names()


def test_a_check_declares_needs_before_it_and_resources_the_scheduler_knows():
    from eppkit.conformance.registry import CHECKS, check

    def rule(h):
        """A rule."""

    with pytest.raises(ValueError, match="needs no-such-check, not declared before it"):
        check("a-rule", "a rule", category="protocol", needs=("no-such-check",), subject="epp")(rule)
    with pytest.raises(ValueError, match="uses a nap: the scheduler knows one run, own testbed"):
        check("a-rule", "a rule", category="protocol", uses=("a nap",), subject="epp")(rule)
    assert "a-rule" not in CHECKS.names()


def test_a_rule_says_the_constants_of_its_module():
    from eppkit.conformance.registry import rule_text, spelled

    assert [spelled(n) for n in (0, 16, 20, 45, 100, 105, 2000, 2500)] == [
        "zero", "sixteen", "twenty", "forty-five", "one hundred", "one hundred and five", "two thousand",
        "two thousand five hundred"]
    namespace = {"N": 16, "SHARE": 0.8, "REQUESTS": 2000}
    exec("def rule(h):\n    '''{N!W} requests, {REQUESTS:,} in all ({REQUESTS!w}), {{literal}}.'''\n", namespace)
    assert rule_text(namespace["rule"]) == "Sixteen requests, 2,000 in all (two thousand), {literal}."
    exec("def bad(h):\n    '''{NOT_A_CONSTANT} requests.'''\n", namespace)
    with pytest.raises(ValueError, match="does not fill in .*NOT_A_CONSTANT"):
        rule_text(namespace["bad"])


def test_no_check_nor_the_engine_probes_a_target_or_a_harness():
    probes = re.compile(r"\b(getattr|hasattr)\((h|harness|self|target|self\.target|h\.target|h\.envoy_binary)\b")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "eppkit" / "conformance").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if probes.search(line)]
    assert found == []


def test_the_scheduler_places_a_check_by_its_needs_and_resources_alone():
    from eppkit.conformance.registry import AUDIT, MAY_TAKE_DOWN, Check
    from eppkit.conformance.schedule import in_order
    from eppkit.conformance.suite import selected

    def made(name, *uses):
        return Check(name, name, "protocol", "must", "here", 0, lambda h: None, uses=frozenset(uses))

    given = [made("crash", MAY_TAKE_DOWN), made("audit", AUDIT), made("plain"), made("crash-2", MAY_TAKE_DOWN),
             made("plain-2")]
    assert [c.name for c in in_order(given)] == ["plain", "plain-2", "audit", "crash", "crash-2"]
    for kind in ("epp", "plugin"):  # each registry lists its checks in an order the scheduler keeps
        assert in_order(selected(kind=kind)) == selected(kind=kind)


def test_pytest_judges_a_check_through_the_scheduler():
    from eppkit.conformance.harness import Harness
    from eppkit.conformance.registry import Check
    from eppkit.conformance.results import FAIL, NOT_RUN, PASS, Result
    from eppkit.conformance.schedule import Scheduler

    told = []
    harness = Harness(Target("ext_proc"), make_bed=lambda topology: None, protocols=("http/1.1",))
    scheduler = Scheduler(harness, on_result=lambda check, result: told.append((check.name, result.status)))
    first = Check("first", "f", "protocol", "must", "here", 0, lambda h: Result(FAIL, "no"))
    second = Check("second", "s", "protocol", "must", "here", 1, lambda h: Result(PASS, "ok"), ("first",))
    assert scheduler.judge(first).status == FAIL
    assert scheduler.judge(second).status == NOT_RUN and scheduler.results["second"].blocked
    assert told == [("first", FAIL), ("second", NOT_RUN)]


def test_a_check_cannot_need_one_the_scheduler_runs_after_it():
    from eppkit.conformance.registry import AUDIT, Check
    from eppkit.conformance.schedule import in_order

    audit = Check("audit", "a", "protocol", "must", "here", 0, lambda h: None, uses=frozenset({AUDIT}))
    plain = Check("plain", "p", "protocol", "must", "here", 1, lambda h: None, ("audit",))
    with pytest.raises(ValueError, match="'plain' needs audit, which runs after it"):
        in_order([audit, plain])


def test_a_rule_moves_with_the_constants_its_code_holds(monkeypatch):
    from eppkit.conformance.checks import CHECKS, routing, sustained

    assert "at least 80 %\n" in CHECKS.get("load-aware").doc
    monkeypatch.setattr(routing, "SHARE", 0.9)
    monkeypatch.setattr(routing, "PROBES", 30)
    assert "30 new requests through Envoy" in CHECKS.get("load-aware").doc
    assert "at least 90 %\n" in CHECKS.get("load-aware").doc
    monkeypatch.setattr(sustained, "REQUESTS", 3000)
    assert CHECKS.get("sustained-load").doc.startswith("Three thousand short chats")
    assert "until all\n    3,000 are sent" in CHECKS.get("sustained-load").doc


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _engine_layers() -> list[list[str]]:
    block = ARCHITECTURE.read_text().split("<!-- verdict engine layers:", 1)[1].split("```", 2)[1]
    return [[room.strip() for room in line.split("|")] for line in block.strip().splitlines()]


def test_the_verdict_engine_imports_down_its_own_layers_only():
    from tests.support.imports import graph

    order = _engine_layers()

    def place(module: str) -> tuple[int, str] | None:
        for i, layer in enumerate(order):
            for room in layer:
                if module == room or module.startswith(room + "."):
                    return i, room
        return None

    engine = {m: found for m, found in graph().items() if m.startswith("eppkit.conformance.")}
    unplaced = sorted(m for m in engine if place(m) is None)
    assert unplaced == [], "place these in docs/architecture.md's verdict engine layers"
    problems = []
    for module, imported in engine.items():
        (mine, room) = place(module)
        for target in imported:
            theirs = place(target)
            if theirs is None:
                continue
            if theirs[0] < mine:
                problems.append(f"{module} imports {target}, a layer above it")
            elif theirs[0] == mine and theirs[1] != room:
                problems.append(f"{module} imports {target}, another room of its own layer")
    assert problems == []


def _example() -> str:
    """docs/architecture.md's example of a check, as a reader copies it."""
    return ARCHITECTURE.read_text().split("<!-- example: a check -->", 1)[1].split("```python", 1)[1].split("```")[0]


class FakeHarness(Harness):
    """A subject without a testbed: its pod answers every request at once, 200, in ``CONTENT_TYPE``."""

    CONTENT_TYPE = "application/json"

    def bed(self, variant="base", topology=None, **options):
        return "the fake testbed"

    def send(self, bed, *, method="POST", **kwargs):
        headers = {"x-inference-pod": "vllm-0", "content-type": self.CONTENT_TYPE}
        hop = Hop({"code": 200, "upstream": "127.0.0.1:8000", "details": "via_upstream"})
        return Sent(ClientResult("trace", 200, headers, body={}), hop, self.protocol)


def fake(content_type: str = "application/json") -> FakeHarness:
    harness = FakeHarness(Target("ext_proc"), make_bed=lambda topology: None)
    harness.CONTENT_TYPE = content_type
    return harness


def test_adding_a_check_is_one_function_with_one_decorator_as_the_architecture_shows(monkeypatch):
    from eppkit.conformance import checks  # noqa: F401  (the kit's own registered: SERVED among them)
    from eppkit.conformance.registry import CHECKS, REGISTRIES, Check
    from eppkit.conformance.schedule import Scheduler
    from eppkit.core.registry import Registry

    registry: Registry[Check] = Registry("conformance check")  # the kit's checks and the example, for this test
    for known in CHECKS.all():
        registry.register(known)
    monkeypatch.setitem(REGISTRIES, "epp", registry)
    namespace = {"__name__": "eppkit.conformance.checks.answers_are_json"}  # where the example says it is saved
    exec(compile(_example(), str(ARCHITECTURE), "exec"), namespace)

    added = registry.get("answers-are-json")
    assert "answers-are-json" not in CHECKS.names()  # (the kit's own registry untouched)
    assert added.needs == ("reply-order", "streamed-body-mutations", "end-of-stream", "serves")
    assert added.doc == ("Three requests through the EPP, each served: each answer's content-type is "
                         "``application/json``.")
    assert added.per_protocol and not added.uses
    passed = Scheduler(fake()).judge(added)
    assert (passed.status, passed.message) == ("pass", "3 answers, each application/json"), passed
    failed = Scheduler(fake("text/plain")).judge(added)
    assert failed.status == "fail" and failed.message.startswith("answers that are not JSON: content-type 'text/plain'")
    blocked = Scheduler(fake(), {"serves": failed}).judge(added)
    assert blocked.status == "not run" and blocked.message == "it needs serves, which failed"


def test_pytests_form_judges_each_check_through_the_scheduler(monkeypatch):
    from eppkit.conformance import testing

    class Hung(FakeHarness):
        def send(self, bed, *, method="POST", **kwargs):  # no answer at all
            return Sent(ClientResult("trace", 0, {}, error="ReadTimeout"), None, self.protocol)

    test = testing.conformance_tests(checks=["serves"])
    monkeypatch.setattr(testing, "Harness", FakeHarness)
    test("request-without-body", eppkit_shared_testbed_factory=lambda topology: None, eppkit_runtime="local")
    monkeypatch.setattr(testing, "Harness", Hung)
    with pytest.raises(pytest.fail.Exception, match="fail: GET /v1/models was never answered"):
        test("request-without-body", eppkit_shared_testbed_factory=lambda topology: None, eppkit_runtime="hung")
    monkeypatch.setattr(testing, "Harness", FakeHarness)  # the same runtime: what it needs failed there
    with pytest.raises(pytest.skip.Exception, match="not run: it needs request-without-body, which failed"):
        test("serves", eppkit_shared_testbed_factory=lambda topology: None, eppkit_runtime="hung")
