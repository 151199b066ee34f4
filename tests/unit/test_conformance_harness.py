"""The conformance harness keeps the base testbed and one variant up: the others are stopped, their record kept; but
never one the check at hand is still using: its runs per protocol go on at once, and one run's next variant must not
pull the testbed out from under the other (CI: no-endpoint-503's http/1.1 run found its Envoy gone, "connection
refused", once its h2c run had started the next variant)."""

from pathlib import Path

from eppkit.conformance.harness import Harness
from eppkit.conformance.target import Target


class FakeBed:
    def __init__(self, topology, log):
        self.topology, self.log, self.stopped = topology, log, False
        self.envoy_binary = "envoy-under-test"

    def hops(self):
        return [f"hop of {self.topology}"]

    def stop(self):
        self.log.append(("stop", self.topology))
        self.stopped = True


def harness(keep):
    log, made = [], []

    def make(topology):
        bed = FakeBed(len(made), log)
        made.append(bed)
        log.append(("start", bed.topology))
        return bed

    return Harness(Target("ext_proc"), make, keep=keep), made, log


def test_the_base_testbed_stays_and_one_variant_besides_it():
    h, made, log = harness(keep=1)
    base = h.bed()
    h.begin_check()  # each check begins so (the scheduler): a variant is retired only once its check is over
    forced = h.forced_bed()
    assert h.forced_bed() is forced  # reused while up
    h.begin_check()
    responses = h.bed("responses", epp_process_response=True)
    assert forced.stopped and not base.stopped and not responses.stopped
    assert h.bed() is base  # the base is never retired
    h.begin_check()
    again = h.forced_bed()
    assert again is not forced and responses.stopped and not base.stopped
    assert [bed for bed in made if not bed.stopped] == [base, again]
    # The stopped testbeds' Envoy record stays for the hop summary.
    assert sorted(h.hops()) == sorted(f"hop of {i}" for i in range(len(made)))
    assert h.envoy_binary == "envoy-under-test"


def test_a_variant_with_its_own_topology_is_retired_like_the_others():
    h, made, _ = harness(keep=1)
    h.bed()
    own = h.bed("fail-open", topology="another target's topology")
    assert own.topology == 1 and made[1] is own
    h.begin_check()
    h.forced_bed()
    assert own.stopped


def test_without_keep_every_variant_stays_up_for_the_maker_to_stop():
    h, made, log = harness(keep=None)
    for variant in ("base", "a", "b", "c"):
        h.bed(variant)
    h.stop()
    assert not any(bed.stopped for bed in made) and not any(entry[0] == "stop" for entry in log)


def test_the_users_filters_on_the_command_line_are_in_every_testbed_the_verdict_starts(tmp_path):
    from eppkit.cli import parser
    from eppkit.conformance.command import target_from

    guard = tmp_path / "guard.lua"
    guard.write_text("function envoy_on_request(handle) end\n")
    target = target_from(parser().parse_args(["conformance", "--lua-filter", f"{guard}@after"]))
    (lua,) = target.topology().filters
    assert (Path(lua.path), lua.position) == (guard, "after")
    assert target.describe()["filters"] == [f"Lua filter {guard} @after"]


def test_a_testbed_of_a_check_beside_the_others_is_never_retired_and_its_record_leaves_with_it():
    h, made, _ = harness(keep=1)
    base = h.bed()
    own = h.own_bed("sustained")
    h.begin_check()
    forced = h.forced_bed()
    h.begin_check()
    h.bed("responses", epp_process_response=True)
    assert forced.stopped and not own.stopped and not base.stopped  # the variants retire each other, not it
    h.release(own)
    assert own.stopped
    # Its thousands of requests are its own check's evidence, not the suite's hop summary.
    assert "hop of 1" not in h.hops() and "hop of 2" in h.hops()


def test_a_check_beside_the_others_runs_in_a_thread_up_to_the_first_latency_check():
    import threading

    from eppkit.conformance import suite
    from eppkit.conformance.checks.registry import Check, Result
    from eppkit.conformance.registry import ONE_RUN, OWN_TESTBED, TIMED

    events, release = [], threading.Event()

    def long_one(h):
        release.wait(5)  # done only once the checks after it ran
        events.append("beside done")
        return Result("pass", "ok")

    def quick(name):
        def run(h):
            events.append(name)
            if name == "after":
                release.set()
            return Result("pass", "ok")
        return run

    checks = [Check("long", "l", "load", "must", "here", 1, long_one, uses=frozenset({ONE_RUN, OWN_TESTBED})),
              Check("after", "a", "protocol", "must", "here", 2, quick("after"), uses=frozenset({ONE_RUN})),
              Check("budget", "b", "latency", "should", "here", 3, quick("budget"), uses=frozenset({ONE_RUN, TIMED}))]

    class Concurrent(Harness):
        def probe_concurrency(self):
            self.concurrent = True
            return True

    original = suite.Harness
    suite.Harness = Concurrent
    try:
        report = suite.run(Target("ext_proc"), lambda topology: FakeBed(topology, []), checks=checks)
    finally:
        suite.Harness = original
    assert events == ["after", "beside done", "budget"]
    assert [c["id"] for c in report["checks"]] == ["long", "after", "budget"]  # reported in the suite's order
    assert {c["status"] for c in report["checks"]} == {"pass"}


def test_a_variant_the_check_at_hand_used_stays_up_while_it_starts_another():
    h, made, _ = harness(keep=1)
    h.begin_check()
    first = h.bed("no-endpoint", epp_subset_hint=["10.255.255.1:1"])
    second = h.bed("ineligible-subset", epp_subset_hint=["vllm-0"])
    assert not first.stopped and not second.stopped
    assert h.bed("no-endpoint", epp_subset_hint=["10.255.255.1:1"]) is first  # the other protocol's run: the same one
    h.begin_check()
    third = h.bed("responses", epp_process_response=True)
    assert first.stopped and second.stopped and not third.stopped
