"""The saturated scenario's plan (bands in turn, each named in GAIE's header; pods that hold few requests; enough in
flight to saturate them), its two runs per mode (shedding, queueing: eppkit.compare.admission) and the per-band
figures (eppkit.compare.bands), with fake testbeds: no processes."""

from __future__ import annotations

import pytest
from eppkit.gateway.hop import Hop
from eppkit.observability.client import ClientResult

from eppkit import compare
from eppkit.compare import admission, bands, bodypaths, sweep
from eppkit.compare import report as rp
from eppkit.compare.options import at, runs, server_args
from eppkit.services.picker.flow_control import DEFAULT_REQUEST_TTL_S
from eppkit.services.picker.headers import OBJECTIVE
from eppkit.workload import SCENARIOS, Driver, Load, plan_requests
from tests.unit.test_compare_run import FakeBed, FakeClient, FakeJaegerProcess

pytestmark = pytest.mark.unit

SATURATED = SCENARIOS["saturated"]


def options(**kw):
    defaults = dict(modes=("direct", "ext_proc"), scenarios=("saturated",), trace_timeout_s=0.5,
                    load=Load(requests=8, concurrency=2, warmup=0), floors=False)
    return compare.CompareOptions(**{**defaults, **kw})


# -- the plan --------------------------------------------------------------------------------------------------

def test_the_saturated_plan_sends_a_critical_and_a_sheddable_band_in_turn_each_naming_its_objective():
    planned = plan_requests(SATURATED, 6, seed=2)
    assert [r.band for r in planned] == ["critical", "sheddable"] * 3
    assert all(r.headers == {OBJECTIVE: r.band} and r.stream for r in planned)
    priorities = dict(SATURATED.bands)
    assert priorities["critical"] >= 0 > priorities["sheddable"], "GAIE sheds a negative priority only"
    assert all(not r.headers and r.band is None for r in plan_requests(SCENARIOS["chat"], 3)), "other scenarios: none"


def test_the_saturated_pods_hold_few_requests_and_enough_are_kept_in_flight_to_saturate_them():
    assert server_args(SATURATED) == ["--max-num-seqs", "2"]
    # GAIE's detector saturates at 5 waiting per pod: each pod gets its 2 running, 5 waiting and more
    assert SATURATED.in_flight_per_pod > SATURATED.max_num_seqs + 5
    assert at(options(), None, SATURATED).load.concurrency == 2 * SATURATED.in_flight_per_pod
    assert at(options(load=Load(concurrency=100)), None, SATURATED).load.concurrency == 100, "more, if asked"
    assert at(options(), 3, SATURATED).load.concurrency == 3, "a sweep's step as given"
    assert at(options(), None, SCENARIOS["chat"]).load.concurrency == 2


def test_each_mode_that_can_runs_shedding_and_queueing_and_the_others_as_they_are():
    modes = ("direct", "ext_proc", "sidecar", "lua-callout", "gaie-epp")
    keys = [r.key for r in runs(options(modes=modes), SATURATED)]
    assert keys == ["direct", "ext_proc", "ext_proc+queueing", "sidecar", "lua-callout", "gaie-epp",
                    "gaie-epp+queueing"]
    assert [r.key for r in runs(options(modes=modes), SCENARIOS["chat"])] == list(modes)
    both = runs(options(modes=("ext_proc",), body_paths=("streamed", "buffered"), concurrency_sweep=(4,)), SATURATED)
    assert [r.key for r in both] == ["ext_proc@c4", "ext_proc+queueing@c4", "ext_proc+buffered@c4",
                                     "ext_proc+buffered+queueing@c4"]
    for run in both:  # each variable read back from the key by its own module
        base = sweep.split(run.key)[0]
        assert (admission.split(base)[1], bodypaths.split(base)) == (run.setting, (run.mode, run.path))


def test_the_kit_epp_reads_the_bands_and_queues_only_in_the_queueing_run():
    shedding = compare.topology_for(options(), "ext_proc", SATURATED)
    queueing = compare.topology_for(options(), "ext_proc", SATURATED, setting=admission.QUEUEING)
    assert shedding.options["epp_watch_pool"] and "flow_control" not in shedding.options
    assert queueing.options["flow_control"] and queueing.options["epp_watch_pool"]
    # under the client's request timeout (30 s), so a request that waits too long is the EPP's 429, not a timeout
    assert queueing.options["default_request_ttl"] == 15.0 < DEFAULT_REQUEST_TTL_S
    assert compare.topology_for(options(), "lua-callout", SATURATED).options == {"scorer": "queue-scorer",
                                                                                 "scorer_parameters": {}}
    assert "epp_watch_pool" not in compare.topology_for(options(), "ext_proc", SCENARIOS["chat"]).options
    assert all(spec.extra_args == ["--max-num-seqs", "2"] for spec in shedding.vllm)


def test_the_driver_sends_each_request_with_its_headers():
    seen = []

    class Recording(FakeClient):
        def chat(self, body, timeout_s=None, headers=None):
            seen.append(headers)
            return super().chat(body, timeout_s=timeout_s)

    Driver(Recording(), Load(concurrency=1)).run(plan_requests(SATURATED, 3))
    assert seen == [{OBJECTIVE: "critical"}, {OBJECTIVE: "sheddable"}, {OBJECTIVE: "critical"}]


# -- the per-band figures --------------------------------------------------------------------------------------

def _sample(i, band, status=200, ttft=None, details=None, error=None, hold=None):
    ok = status == 200 and error is None
    out = {"index": i, "band": band, "status": status, "ok": ok, "ttft_ms": ttft, "steps": {},
           "error": None if ok else (error or f"http_{status}"), "hop": {} if hold is None else {"hold": hold}}
    return {**out, "envoy_details": details} if details else out


def test_a_band_counts_what_was_served_its_ttft_and_what_was_dropped_by_status_and_by_whom():
    samples = [_sample(0, "critical", ttft=100.0, hold=1.0), _sample(1, "sheddable", 429, details="epp_shed"),
               _sample(2, "critical", ttft=300.0, hold=3.0), _sample(3, "sheddable", 429, details="epp_shed"),
               _sample(4, "critical", 503, details="epp_rejected-no-endpoints"),
               _sample(5, "sheddable", ttft=900.0), _sample(6, "sheddable", 0, error="timeout"),
               _sample(7, "sheddable", 429)]
    critical, sheddable = bands.summarize(samples, SATURATED.bands)
    assert (critical["band"], critical["priority"], critical["sent"], critical["served"]) == ("critical", 1, 3, 2)
    assert (critical["ttft"]["p50"], critical["ttft"]["n"], critical["hold"]["p50"]) == (200.0, 2, 2.0)
    assert critical["dropped"] == {"503": 1} and critical["dropped_by"] == {"epp_rejected-no-endpoints": 1}
    assert (sheddable["sent"], sheddable["served"], sheddable["ttft"]["p99"], sheddable["hold"]) == (5, 1, 900.0, None)
    assert sheddable["dropped"] == {"429": 3}
    assert sheddable["dropped_by"] == {"epp_shed": 2, bands.NOT_RECORDED: 1}
    assert sheddable["errors"] == {"timeout": 1}, "a timeout is no drop"
    nothing = bands.summarize([_sample(0, "critical", 429)], SATURATED.bands)[1]
    assert (nothing["sent"], nothing["ttft"], nothing["dropped"]) == (0, None, {})


def test_the_band_table_sets_each_band_shedding_run_beside_its_queueing_run():
    shed = [_sample(0, "critical", ttft=2000.0), _sample(1, "sheddable", 429, details="epp_shed")]
    queue = [_sample(0, "critical", ttft=700.0, hold=100.0), _sample(1, "sheddable", ttft=1500.0, hold=900.0)]
    block = {"modes": {
        "direct": {"status": "ok", "by_band": bands.summarize(shed, SATURATED.bands), "admission": None},
        "ext_proc": {"status": "ok", "by_band": bands.summarize(shed, SATURATED.bands), "admission": "shedding"},
        "ext_proc+queueing": {"status": "ok", "by_band": bands.summarize(queue, SATURATED.bands),
                              "admission": "queueing"},
        "lua-callout": {"status": "failed", "error": "boom"}}}
    table = bands.table(block)
    assert [row[:3] for row in table.rows] == [
        ["critical (1)", "direct", "–"], ["critical (1)", "ext_proc", "shedding"],
        ["critical (1)", "ext_proc+queueing", "queueing"], ["sheddable (-1)", "direct", "–"],
        ["sheddable (-1)", "ext_proc", "shedding"], ["sheddable (-1)", "ext_proc+queueing", "queueing"]]
    assert table.rows[1][3:] == ["1/1", "2000.0", "2000.0", "–", "0", "0"]
    assert table.rows[4][3:] == ["0/1", "–", "–", "–", "429×1 (epp_shed×1)", "0"]
    assert table.rows[5][3:7] == ["1/1", "1500.0", "1500.0", "900.0"]
    assert table in rp.extra_tables({}, block)
    assert bands.table({"modes": {"direct": {"status": "ok"}}}) is None, "not a scenario of bands"


# -- a whole run ------------------------------------------------------------------------------------------------

class SheddingClient(FakeClient):
    """Serves the critical band and answers the sheddable one 429, as a saturated pool's EPP does."""

    answered: dict[str, int] = {}

    def chat(self, body, timeout_s=None, headers=None):
        result = super().chat(body, timeout_s=timeout_s)
        if (headers or {}).get(OBJECTIVE) == "sheddable":
            result.status, result.body = 429, {"error": {"message": "request shed"}}
        SheddingClient.answered[result.trace_id] = result.status
        return result


class PoolBed(FakeBed):
    """A testbed with a control plane (its objectives recorded) and Envoy's record of each request."""

    made: list[tuple[str, bool, dict]] = []  # each testbed's mode, whether it queues, the objectives it was given

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.pool = self if self.topology.options.get("epp_watch_pool") else None
        self.objectives: dict[str, int] = {}
        PoolBed.made.append((self.topology.mode, bool(self.topology.options.get("flow_control")), self.objectives))

    def add_objective(self, name, priority):
        self.objectives[name] = priority

    def client(self, pool_size=10):
        return SheddingClient()

    def hops(self):
        return [Hop({"traceparent": f"00-{trace_id}-{'0' * 16}-01", "code": status,
                     "details": "epp_shed" if status == 429 else "via_upstream"})
                for trace_id, status in SheddingClient.answered.items()]


def test_a_saturated_comparison_tells_the_epp_the_bands_and_reports_each_band_per_run(tmp_path):
    PoolBed.made.clear()

    def create(topology, runtime="local", jaeger=None):
        return PoolBed(tmp_path / f"run-{len(PoolBed.made)}", topology, trace_file="chat-ext_proc.json")

    # not streamed: the fake client answers one JSON body
    report = compare.run(options(stream=False), tmp_path / "r", jaeger=FakeJaegerProcess(), create=create)
    block = report["scenarios"]["saturated"]
    assert list(block["modes"]) == ["direct", "ext_proc", "ext_proc+queueing"]
    assert PoolBed.made == [("direct", False, {}), ("ext_proc", False, dict(SATURATED.bands)),
                            ("ext_proc", True, dict(SATURATED.bands))]
    assert [block["modes"][k]["admission"] for k in block["modes"]] == [None, "shedding", "queueing"]
    assert block["workload"]["concurrency"] == 2 * SATURATED.in_flight_per_pod
    critical, sheddable = block["modes"]["ext_proc"]["by_band"]
    assert (critical["served"], critical["sent"], sheddable["served"]) == (4, 4, 0)
    assert sheddable["dropped"] == {"429": 4} and sheddable["dropped_by"] == {"epp_shed": 4}
    assert "Per priority band" in rp.format_table(report)


def test_a_drop_is_told_by_envoy_s_details_or_as_the_epp_s_own_answer_when_it_set_none():
    assert bands.who_answered(Hop({"details": "epp_shed"})) == "epp_shed"
    assert bands.who_answered(Hop({"details": ""}, {"received_immediate_response": True})) == bands.UNSAID
    assert bands.who_answered(Hop({"details": ""}, {})) == "no details"
