"""The saturation check: a pool that would not saturate, in its pods' own words, leaves it not run, never passed; each
probe is judged by its objective's priority (429 from the EPP with an OpenAI-style error, or served); --saturation
reaches the Target from the command line; the kit's EPP watches its pool for it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eppkit.conformance.checks import CHECKS, saturation
from eppkit.conformance.checks.registry import NOT_APPLICABLE, NOT_RUN
from eppkit.conformance.suite import run_check
from eppkit.conformance.target import Target
from tests.support.own_testbed import NoLoad, OwnTestbedHarness

pytestmark = pytest.mark.unit

SATURATED = {saturation.WAITING: 6.0, saturation.KV_USAGE: 0.01}
CALM = {saturation.WAITING: 4.0, saturation.KV_USAGE: 0.5}
SHED = {"error": {"message": "request shed", "type": "RateLimitError", "param": None, "code": "shed"}}


class Hop(dict):
    """Envoy's record of one request, as much of it as the check reads."""

    def __init__(self, *, immediate: bool, upstream: str = "-", code: int = 200):
        super().__init__(code=code, details="epp_shed" if immediate else "via_upstream", flags="-", route="picked",
                         upstream=upstream, destination=None, destination_header=None, served=None)
        self.ext_proc = {"received_immediate_response": immediate}

    def call_statuses(self):
        return {}

    def phases(self):
        return {}


def sent(status: int, *, immediate: bool = False, body=None, upstream: str = "127.0.0.2:8000"):
    return SimpleNamespace(result=SimpleNamespace(status=status, body=body), protocol="http/1.1",
                           hop=Hop(immediate=immediate, upstream="-" if immediate else upstream, code=status))


def conforming(i: int):
    """What a conforming EPP answers probe ``i``: 429 from itself to the sheddable, served otherwise."""
    return sent(429, immediate=True, body=SHED) if saturation.kind_of(i)[1] < 0 else sent(200)


def test_the_probes_alternate_sheddable_and_standard_in_both_protocols():
    kinds = [saturation.kind_of(i) for i in range(saturation.PROBES)]
    assert kinds[:4] == [saturation.SHEDDABLE, saturation.SHEDDABLE, saturation.STANDARD, saturation.STANDARD]
    assert saturation.SHEDDABLE[1] < 0 <= saturation.STANDARD[1] and kinds.count(saturation.SHEDDABLE) == 6


def test_a_pod_over_either_of_gaies_thresholds_is_saturated():
    assert saturation.over({saturation.WAITING: 5.0})
    assert saturation.over({saturation.KV_USAGE: 0.8})
    assert not saturation.over(CALM)


def test_a_conforming_answer_passes_and_each_wrong_one_is_named():
    names = {"127.0.0.2:8000": "vllm-0"}
    problems, said, shed, served = saturation.judge([conforming(i) for i in range(saturation.PROBES)], names)
    assert (problems, shed, served) == ([], 6, 6)
    assert len(said) == 1 and said[0].startswith("request 1 (http/1.1, x-gateway-inference-objective: eppkit-sheddable, "
                                                 'priority -1): HTTP 429, {"error": {"message": "request shed"')
    answers = [conforming(i) for i in range(saturation.PROBES)]
    answers[0] = sent(200)  # a sheddable request served
    answers[1] = sent(429, immediate=True, body="inference error: ResourceExhausted")  # 429, not OpenAI JSON
    answers[2] = sent(429, immediate=True, body=SHED)  # a standard request shed
    answers[4] = sent(503, immediate=True, body=SHED)  # the wrong status
    problems, evidence, shed, served = saturation.judge(answers, names)
    assert "request 1 (http/1.1, x-gateway-inference-objective: eppkit-sheddable, priority -1) was served (by " \
           "vllm-0) while every pod was saturated" in problems[0]
    assert "got 429 from the EPP but its body is no OpenAI-style error" in problems[1]
    assert "request 3 (http/1.1, x-gateway-inference-objective: eppkit-standard, priority 0) was shed" in problems[2]
    assert "got HTTP 503, not the EPP's 429" in problems[3]
    assert len(problems) == 4 and len(evidence) == 5 and (shed, served) == (3, 5)  # and the first one shed
    # A 429 Envoy made itself (no EPP reply) is not the EPP shedding.
    answers = [conforming(i) for i in range(saturation.PROBES)]
    answers[0] = sent(429, body=SHED)
    assert "not the EPP's 429" in saturation.judge(answers, names)[0][0]


def test_an_openai_error_has_a_message():
    assert saturation.openai_error(SHED)
    assert not saturation.openai_error({"error": "shed"}) and not saturation.openai_error("shed")


def harness():
    return OwnTestbedHarness(Target("ext_proc", saturation=True), [f"127.0.0.{i + 2}:8000" for i in range(3)])


def test_a_pool_that_would_not_saturate_leaves_the_check_not_run(monkeypatch):
    monkeypatch.setattr(saturation, "BusyLoad", NoLoad)
    monkeypatch.setattr(saturation, "scrape", lambda address: dict(CALM if address.startswith("127.0.0.3") else
                                                                   SATURATED))
    monkeypatch.setattr(saturation, "BUSY_WITHIN_S", 0.1)
    h = harness()
    result = saturation.saturation(h)
    assert result.status == NOT_RUN, result
    assert "vllm-1 would not saturate: its /metrics showed" in result.message and "5 waiting" in result.message
    assert h.log == ["released"]  # no request judged on a pool that never saturated; its testbed stopped
    assert "no control plane in this testbed" in result.evidence[0]


def test_saturation_is_declared_and_runs_beside_the_others():
    check = CHECKS.get("saturation")
    assert check.level == "should" and not check.per_protocol and check.beside
    result = run_check(check, SimpleNamespace(target=Target("ext_proc")), {})
    assert result.status == NOT_APPLICABLE and "--saturation" in result.message
    assert Target("ext_proc", saturation=True).describe()["saturation"] is True


def test_the_command_line_declares_saturation():
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    assert target_from(parser().parse_args(["conformance", "--mode", "ext_proc", "--saturation"])).saturation
    assert not target_from(parser().parse_args(["conformance", "--mode", "ext_proc"])).saturation


def test_the_kit_epp_watches_its_pool_for_the_objectives_and_others_keep_their_options():
    topology = saturation.topology(Target("ext_proc", {"scorer": "round-robin"}, saturation=True))
    assert topology.options == {"scorer": "round-robin", "epp_watch_pool": True}
    assert all(v.extra_args[-2:] == ["--max-num-seqs", "2"] for v in topology.vllm)
    assert "epp_watch_pool" not in saturation.topology(Target("gaie-epp", saturation=True)).options
