"""The conformance suite's machinery without a testbed: the registry, the order and needs of checks, the report."""

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from eppkit.services.echo_epp import MISBEHAVIOURS

from eppkit.conformance import report as rp
from eppkit.conformance.checks import CHECKS
from eppkit.conformance.checks.registry import FAIL, NOT_RUN, PASS, Check, Result
from eppkit.conformance.harness import Harness
from eppkit.conformance.registry import ONE_RUN, SOAK
from eppkit.conformance.suite import run, run_check, selected
from eppkit.conformance.target import Target

pytestmark = pytest.mark.unit

# A harness whose testbeds are never asked for, one client protocol: the checks below judge nothing through it.
BARE = Harness(Target("ext_proc"), make_bed=lambda topology: None, protocols=("http/1.1",))


def test_every_check_is_registered_once_with_its_rule_level_and_source():
    checks = CHECKS.all()
    assert len({c.name for c in checks}) == len(checks) >= 20
    for c in checks:
        assert c.doc and c.source and c.level in ("must", "should") and c.category in (
            "data plane", "protocol", "load", "latency", "tracing")
        for need in c.needs:  # a check needs only checks that run before it, and a must no should
            assert CHECKS.get(need).order < c.order, (c.name, need)
            assert not (c.level == "must" and CHECKS.get(need).level == "should"), (c.name, need)


def test_the_protocol_checks_run_first_and_an_unknown_check_is_refused():
    categories = [c.category for c in CHECKS.all()]
    assert categories.index("data plane") > max(i for i, c in enumerate(categories) if c == "protocol")
    assert [c.name for c in selected(["reply-order"])] == ["reply-order"]
    # A check is run with every check it needs, transitively, in the suite's order.
    assert [c.name for c in selected(["serves"])] == ["reply-order", "streamed-body-mutations", "end-of-stream",
                                                      "request-without-body", "serves"]
    assert "serves" in [c.name for c in selected(["follows-pick"])]
    with pytest.raises(ValueError, match="unknown conformance check 'nope'"):
        selected(["nope"])


def test_a_check_whose_needs_failed_is_not_run():
    ran = []
    check = Check("b", "b", "protocol", "must", "here", 1, lambda h: ran.append(1) or Result(PASS, "ok"), ("a",))
    result = run_check(check, harness=BARE, results={"a": Result(FAIL, "no")})
    assert (result.status, ran) == (NOT_RUN, []) and "needs a" in result.message


def test_a_check_that_raises_fails_with_what_happened():
    check = Check("c", "c", "protocol", "must", "here", 1, lambda h: 1 / 0)
    result = run_check(check, harness=BARE, results={})
    assert result.status == FAIL and "ZeroDivisionError" in result.message


def test_the_report_as_junit_text_and_html(tmp_path):
    checks = [c for c in CHECKS.all() if c.name in ("reply-order", "end-of-stream")]
    answers = {"reply-order": Result(PASS, "in order", ["Envoy's access log: {...}"]),
               "end-of-stream": Result(FAIL, "never finished", ["no upstream_sent"])}
    fake = [Check(c.name, c.title, c.category, c.level, c.source, c.order, lambda h, n=c.name: answers[n], ())
            for c in checks]

    report = run(Target("ext_proc"), make_bed=lambda t: None, checks=fake, runtime="local")
    assert report["verdict"] == "does not conform" and report["summary"] == {"fail": 1, "pass": 1}
    suite = ET.fromstring(rp.junit(report))
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failure = suite.find("testcase[@name='end-of-stream']/failure")
    assert failure.get("message") == "[must] never finished" and "no upstream_sent" in failure.text
    assert "✗ fail     end-of-stream" in rp.text(report)
    paths = rp.write(report, tmp_path)
    assert "never finished" in paths["html"].read_text() and paths["json"].exists()


def test_a_target_names_a_mode_behind_ext_proc_and_knows_how_the_kits_epp_sheds():
    assert Target("ext_proc").shed() == {"x-eppkit-shed": "1"}
    assert Target("gaie-epp").test_header_options == {"conformance": True}
    with pytest.raises(ValueError, match="judges an EPP behind ext_proc"):
        Target("lua-callout")
    with pytest.raises(ValueError, match="exactly one of epp_command"):
        Target("external-epp").validate()


def test_the_echo_epp_names_its_faults():
    assert "none" in MISBEHAVIOURS and all(MISBEHAVIOURS.values())


def test_the_guide_lists_every_check_with_its_level():
    """bring-your-own-epp.md's table of checks is the registry's: same ids, same levels."""
    import re

    from tests.support.imports import ROOT

    text = (ROOT / "docs" / "bring-your-own-epp.md").read_text().split("## Judge your EPP")[1]
    documented: dict[str, str] = {}
    for ids, levels in re.findall(r"^\| (`[a-z0-9-]+`(?:, `[a-z0-9-]+`)*) \| ([a-z, ]+) \|", text, re.MULTILINE):
        names = re.findall(r"`([a-z0-9-]+)`", ids)
        marks = [level.strip() for level in levels.split(",")]
        documented.update(zip(names, marks * len(names) if len(marks) == 1 else marks))
    assert documented == {check.name: check.level for check in CHECKS.all()}


def test_a_check_blocked_by_a_failure_blocks_what_needs_it_and_a_check_not_witnessed_does_not():
    ran = []
    check = Check("c", "c", "protocol", "must", "here", 3, lambda h: ran.append(1) or Result(PASS, "ok"), ("b",))
    blocked = run_check(check, harness=BARE, results={"b": Result(NOT_RUN, "needs a", blocked=True)})
    assert blocked.status == NOT_RUN and blocked.blocked and ran == []
    unwitnessed = run_check(check, harness=BARE, results={"b": Result(NOT_RUN, "its requests were not served")})
    assert unwitnessed.status == PASS and ran == [1]


def test_a_check_passes_only_where_every_protocol_passed():
    from eppkit.conformance.suite import combine

    ok, bad, unjudged = Result(PASS, "fine"), Result(FAIL, "hung", ["e"]), Result(NOT_RUN, "refused")
    assert combine([("http/1.1", ok), ("h2c", ok)]).status == PASS
    failed = combine([("http/1.1", ok), ("h2c", bad)])
    assert (failed.status, failed.message, failed.evidence) == (FAIL, "[h2c] hung", ["[h2c] e"])
    assert combine([("http/1.1", ok), ("h2c", unjudged)]).status == NOT_RUN
    assert combine([("http/1.1", Result("n/a", "no trailers")), ("h2c", ok)]).status == PASS


def test_levels_make_the_verdict():
    from eppkit.conformance.suite import CONFORMS, FAILS, INCOMPLETE, PARTIAL, WARNINGS, verdict

    must = Check("m", "m", "protocol", "must", "here", 1, lambda h: None)
    should = Check("s", "s", "protocol", "should", "here", 2, lambda h: None)
    both = [must, should]

    def judge(m, s_, **kw):
        return verdict(both, {"m": m, "s": s_}, partial=kw.get("partial", False), strict=kw.get("strict", False))

    ok, bad = Result(PASS, "ok"), Result(FAIL, "no")
    assert judge(ok, ok) == CONFORMS
    assert judge(ok, bad) == WARNINGS  # a failed should is a warning
    assert judge(ok, bad, strict=True) == FAILS
    assert judge(bad, ok) == FAILS
    assert judge(Result(NOT_RUN, "its requests were refused"), ok) == INCOMPLETE  # a must without a witness
    assert judge(Result(NOT_RUN, "needs x", blocked=True), ok) == CONFORMS  # (x itself would have failed)
    assert judge(ok, ok, partial=True) == PARTIAL  # --check never says conforms


def test_a_must_left_out_as_asked_is_named_after_the_verdict_and_ranks_below_it():
    from eppkit.conformance import command
    from eppkit.conformance.report import matrix
    from eppkit.conformance.suite import CONFORMS, FAILS, WARNINGS, base_verdict, verdict

    soak = Check("soak", "soak", "load", "must", "here", 1, lambda h: None, uses=frozenset({SOAK}))
    should = Check("s", "s", "protocol", "should", "here", 2, lambda h: None)
    skipped = Result(NOT_RUN, "skipped, as asked (--quick)", skipped=True)
    quick = verdict([soak, should], {"soak": skipped, "s": Result(PASS, "ok")}, partial=False, strict=False)
    assert quick == "conforms; skipped as asked (--quick): soak" and base_verdict(quick) == CONFORMS
    warned = verdict([soak, should], {"soak": skipped, "s": Result(FAIL, "no")}, partial=False, strict=False)
    assert base_verdict(warned) == WARNINGS and warned != WARNINGS
    assert command.exit_code({"verdict": quick}) == 0  # asked for: the verdict all the same, its first line says so
    # in a version matrix a verdict that left a must out is worse than the same one without
    reports = [{"verdict": v, "versions": {"envoy": e}, "schema": "s", "created": "c", "subject": {"kind": "epp"},
                "runtime": "local", "wall_s": 1, "checks": [], "summary": {}}
               for v, e in ((CONFORMS, "1.40.0"), (quick, "1.39.3"))]
    assert matrix(reports)["verdict"] == quick
    assert matrix([{**reports[0], "verdict": FAILS}, reports[1]])["verdict"] == FAILS


def test_the_exit_code_says_conforms_fails_or_no_verdict_and_all_picks_one_release_per_line(monkeypatch):
    from eppkit.conformance import command
    from eppkit.conformance.suite import CONFORMS, FAILS, INCOMPLETE, PARTIAL, WARNINGS
    from eppkit.gateway import versions

    assert [command.exit_code({"verdict": v}) for v in (CONFORMS, WARNINGS, FAILS, PARTIAL, INCOMPLETE)] == \
        [0, 0, 1, 3, 3]
    cached = [versions.EnvoyBinary(Path(f"/e/{v}"), v) for v in ("1.36.2", "1.36.4", "1.37.0", "1.39.0", "1.39.3")]
    monkeypatch.setattr(versions, "cached", lambda: cached)
    monkeypatch.setattr(versions, "installed_with_eppkit", lambda: versions.EnvoyBinary(Path("/e/1.40.0"), "1.40.0"))
    assert command.envoy_versions("all") == ["1.36.4", "1.37.0", "1.39.3", "1.40.0"]
    assert command.envoy_versions("1.38.3,1.36.2") == ["1.38.3", "1.36.2"]
    assert command.envoy_versions(None) == [None]


def test_the_soak_is_left_out_with_quick_and_judged_once_in_a_version_matrix():
    from types import SimpleNamespace

    from eppkit.conformance.suite import run_check

    ran = []
    soak = Check("soak", "the soak", "load", "must", "here", 1, lambda h: ran.append(h) or Result(PASS, "ok"),
                 uses=frozenset({ONE_RUN, SOAK}))
    quick = run_check(soak, SimpleNamespace(target=None, quick=True, soak_judged_on=None), {})
    assert (quick.status, quick.skipped, ran) == (NOT_RUN, True, [])
    assert "--quick" in quick.message
    later = run_check(soak, SimpleNamespace(target=None, quick=False, soak_judged_on="1.36.4"), {})
    assert later.status == "n/a" and "judged once in a version matrix, on Envoy 1.36.4" in later.message
    assert ran == []
