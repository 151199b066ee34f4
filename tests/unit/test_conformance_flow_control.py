"""The flow-control checks' own logic (eppkit/conformance/checks/flow_control.py), without a testbed: what they
declare, the testbed they ask for, and how fairness counts a run."""

from __future__ import annotations

import pytest

from eppkit.conformance.checks import CHECKS
from eppkit.conformance.checks.flow_control import MAX_RUN, longest_run, topology
from eppkit.conformance.target import Target

FLOW_CHECKS = ("queued-then-served", "priority-bands", "fairness", "ttl-drop")


def test_the_flow_control_checks_are_n_a_unless_declared():
    for name in FLOW_CHECKS:
        assert "--flow-control" in CHECKS.get(name).not_declared(Target())
        assert CHECKS.get(name).not_declared(Target(flow_control=True)) is None


def test_the_queue_checks_need_queued_then_served():
    assert all(CHECKS.get(name).needs == ("queued-then-served",) for name in FLOW_CHECKS[1:])


@pytest.mark.parametrize("flows, run", [("ababa", 1), ("aaabb", 3), ("aabab", 2), ("abbba", 3), ("abaaa", 1)])
def test_fairness_counts_the_longest_run_while_the_other_flow_waits(flows, run):
    assert longest_run(list(flows)) == run
    assert (run <= MAX_RUN) == (flows not in ("aaabb", "abbba"))


def test_the_kit_epp_is_judged_with_flow_control_and_the_declared_ttl_on_one_pod():
    bed = topology(Target(flow_control=True, flow_control_ttl=6.0))
    assert len(bed.vllm) == 1
    assert bed.options["flow_control"] is True and bed.options["default_request_ttl"] == 6.0
    assert bed.vllm[0].extra_args[-2:] == ["--max-num-seqs", "1"]
    other = topology(Target("external-epp", {"epp_command": "my-epp {endpoints}"}, flow_control=True))
    assert "flow_control" not in other.options


def test_a_declared_ttl_too_short_to_judge_or_a_drop_status_that_is_no_error_is_refused():
    with pytest.raises(ValueError, match="at least 4"):
        Target(flow_control=True, flow_control_ttl=1.0)
    with pytest.raises(ValueError, match="an HTTP error status"):
        Target(flow_control=True, flow_control_drop_status=200)


def test_the_kit_epp_takes_its_flow_control_options_in_mode_ext_proc():
    from eppkit import modes

    bed = topology(Target(flow_control=True), epp_watch_pool=True)
    modes.check(bed)  # a ValueError names an option the mode does not know
    options = modes.options_for(bed)
    assert options.flow_control and options.flow() == {"ttl_s": 5.0, "max_per_band": 5000, "policy": "round-robin"}


def test_requests_let_on_together_are_one_wave_whose_order_is_not_judged():
    from eppkit.conformance.checks.flow_control import Probe, waves

    probes = [Probe(label, {}, upstream_at=at) for label, at in (("a", 1.0), ("b", 1.01), ("c", 1.6), ("d", 2.2))]
    assert [[p.label for p in wave] for wave in waves(probes)] == [["a", "b"], ["c"], ["d"]]
