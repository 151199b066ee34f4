"""The pd-disaggregation check's judgement over Envoy's records and the pods' spans: a decode-capable destination, a
prefill-capable pod named in x-prefiller-host-port, the pod that prefilled in its own spans; the roles as llm-d
names them; --pd reaches the Target and leaves the check n/a without it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eppkit.conformance.checks import CHECKS, disaggregation
from eppkit.conformance.checks.disaggregation import Pod, PdRequest, judge, prefilled_by
from eppkit.conformance.target import Target
from eppkit.observability.contract import Service, Vllm
from eppkit.services.picker import roles

pytestmark = pytest.mark.unit

P, D0, D1 = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"
POOL = {P: Pod("vllm-p0", roles.PREFILL), D0: Pod("vllm-d0", roles.DECODE), D1: Pod("vllm-d1", roles.DECODE)}


def request(destination=D0, upstream=None, prefiller=P, prefilled=("vllm-p0",), status=200, traced=True, answer=""):
    return PdRequest("request 1 (h2c)", status, destination, upstream or destination, prefiller, list(prefilled),
                     traced, answer)


def test_a_decode_destination_with_the_prefill_pod_that_prefilled_passes():
    problems, evidence = judge([request(), request(destination=D1)], POOL)
    assert problems == []
    assert "the EPP's destination 127.0.0.1:9002 (vllm-d0, llm-d.ai/role=decode)" in evidence[0]
    assert "prefilled, in the pods' spans, by vllm-p0" in evidence[0]


def test_a_prefill_only_destination_fails_and_says_where_it_went():
    problems, _ = judge([request(destination=P, prefilled=(), traced=False)], POOL)
    assert problems == ["request 1 (h2c)'s destination is 127.0.0.1:9001 (vllm-p0, llm-d.ai/role=prefill), not a "
                        "decode-capable pod"]


def test_landing_on_a_prefill_only_pod_fails_even_when_the_epp_named_a_decode_pod():
    problems, _ = judge([request(upstream=P, prefilled=(), traced=False)], POOL)
    assert problems == ["request 1 (h2c) landed on 127.0.0.1:9001 (vllm-p0, llm-d.ai/role=prefill), a prefill-only pod"]


def test_a_decode_pod_named_to_prefill_fails_with_the_sidecars_answer_in_the_evidence():
    problems, evidence = judge([request(prefiller=D1, status=400, traced=False, prefilled=(),
                                        answer="x-prefiller-host-port names 127.0.0.1:9003, not a prefiller")], POOL)
    assert problems == ["request 1 (h2c)'s x-prefiller-host-port names 127.0.0.1:9003 (vllm-d1, "
                        "llm-d.ai/role=decode), not a prefill-capable pod"]
    assert "the answer: x-prefiller-host-port names 127.0.0.1:9003" in evidence[0]


@pytest.mark.parametrize("prefiller, words", [
    ("", "named no prefill pod (x-prefiller-host-port) in a pool with prefill-only pods"),
    ("10.0.0.9:8000", "names 10.0.0.9:8000 (no pod of the pool), not a prefill-capable pod"),
])
def test_no_prefill_pod_or_one_outside_the_pool_fails(prefiller, words):
    problems, _ = judge([request(prefiller=prefiller, traced=False, prefilled=())], POOL)
    assert len(problems) == 1 and words in problems[0]


def test_a_prefill_done_elsewhere_than_named_fails_in_the_pods_words():
    pool = {**POOL, "127.0.0.1:9004": Pod("vllm-p1", roles.PREFILL)}
    problems, _ = judge([request(prefilled=("vllm-p1",))], pool)
    assert problems == ["request 1 (h2c) named vllm-p0 to prefill, but the pods' spans say vllm-p1 did"]
    problems, _ = judge([request(prefilled=())], pool)
    assert problems == ["request 1 (h2c) named vllm-p0 to prefill, but the pods' spans say no pod did"]


def test_a_both_pod_may_be_destination_and_prefiller():
    pool = {P: Pod("vllm-0", roles.BOTH), D0: Pod("vllm-1", roles.DECODE)}
    problems, _ = judge([request(destination=P, prefiller=P, prefilled=("vllm-0",))], pool)
    assert problems == []


def span(role: str, params: str, instance: str, name: str = Vllm.REQUEST, service: str = Service.VLLM):
    return SimpleNamespace(service=service, name=name, attributes={Vllm.ROLE: role, Vllm.INSTANCE: instance,
                                                                   Vllm.KV_TRANSFER_PARAMS: params})


def test_the_prefill_is_read_from_the_prefill_vllms_own_request_span():
    trace = SimpleNamespace(spans=[span("prefill", "do_remote_decode", "vllm-p0"),
                                   span("decode", "do_remote_prefill", "vllm-d0"),
                                   span("prefill", "do_remote_decode", "vllm-p0", name="vllm.prefill")])
    assert prefilled_by(trace) == ["vllm-p0"]


def test_roles_as_llm_d_names_them():
    every = (roles.PREFILL, roles.DECODE, roles.BOTH, "")
    assert [r for r in every if roles.decode_capable(r)] == ["decode", "both", ""]
    assert [r for r in every if roles.prefill_capable(r)] == ["prefill", "both"]
    assert roles.parse_roles("127.0.0.1:1=prefill, 127.0.0.1:2=decode") == {"127.0.0.1:1": "prefill",
                                                                             "127.0.0.1:2": "decode"}
    with pytest.raises(ValueError, match="llm-d.ai/role 'encode'"):
        roles.parse_roles("127.0.0.1:1=encode")
    assert roles.disaggregated(["decode", "prefill"]) and not roles.disaggregated(["both", "decode"])


def test_the_check_is_declared_by_pd_and_runs_on_the_pd_pool_flow():
    check = CHECKS.get("pd-disaggregation")
    assert check.level == "must"
    assert "--pd" in check.not_declared(Target())
    assert check.not_declared(Target(pd=True)) is None
    topology = disaggregation.pd_topology(Target(pd=True))
    assert (topology.flow, topology.prefill, topology.decode) == ("pd-pool", 1, 2)
    assert Target(pd=True).describe()["pd"] is True


def test_pd_reaches_the_target_from_the_command_line():
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    assert target_from(parser().parse_args(["conformance", "--mode", "ext_proc", "--pd"])).pd
    assert not target_from(parser().parse_args(["conformance", "--mode", "ext_proc"])).pd


def test_the_check_is_n_a_where_the_mode_cannot_host_a_disaggregated_pool():
    from eppkit.conformance.suite import run_check

    from eppkit.conformance.harness import Harness

    result = run_check(CHECKS.get("pd-disaggregation"), Harness(Target("gaie-epp", pd=True), lambda t: None), {})
    assert result.status == "n/a" and "runs the aggregated flow" in result.message, result.message
    watching = Target("ext_proc", {"epp_watch_pool": True}, pd=True)
    result = run_check(CHECKS.get("pd-disaggregation"), Harness(watching, lambda t: None), {})
    assert result.status == "n/a" and "watches its pool in a control plane" in result.message, result.message
