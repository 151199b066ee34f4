"""The comparison report from plain samples: numbers, overheads, baseline gates, text, and the folder."""

import copy
import json
import shutil
from pathlib import Path

import pytest
from eppkit.observability.contract import Epp

from eppkit.compare import output
from eppkit.compare import report as rp
from tests.support.report_samples import mode_result, report_with, sample

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"


def test_summarize_counts_errors_by_kind_and_takes_latency_from_successes_only():
    samples = [sample(0, 250), sample(1, 260), sample(2, 270, complete=False, missing=["epp:epp.inject"]),
               sample(3, 0, error="http_503"), sample(4, 0, error="http_503"), sample(5, 0, error="timeout")]
    r = rp.summarize_mode(samples, planned=8, wall_s=2.0, stopped="max duration")
    assert r["requests"] == {"planned": 8, "sent": 6, "ok": 3, "failed": 3}
    assert r["errors"] == {"http_503": 2, "timeout": 1}
    assert r["error_rate"] == 0.5
    assert r["completeness"] == {"checked": 3, "complete": 2, "ratio": 0.6667, "missing": {"epp:epp.inject": 1}}
    assert r["steps"]["e2e"]["p50"] == 260 and r["steps"]["e2e"]["n"] == 3
    assert r["throughput"] == {"requests_per_s": 1.5, "output_tokens_per_s": 15.0}
    assert "decision" not in r["steps"]
    assert sum(r["breakdown_mean_ms"].values()) == pytest.approx(260)
    assert r["stopped_early"] == "max duration"


def test_overhead_is_each_percentile_minus_directs():
    modes = {"direct": mode_result([sample(i, 250 + i, gateway=0.2) for i in range(5)]),
             "ext_proc": mode_result([sample(i, 260 + i, gateway=5.2, decision=0.2, roundtrip=4.0) for i in range(5)])}
    rp.add_overheads(modes)
    over = modes["ext_proc"]["overhead_vs_direct"]
    assert over["e2e"] == {"p50": 10.0, "p90": 10.0, "p99": 10.0}
    assert over["gateway"]["p50"] == pytest.approx(5.0)
    assert modes["direct"]["overhead_vs_direct"]["e2e"]["p50"] == 0.0


def test_without_a_working_direct_there_is_no_overhead():
    modes = {"direct": {"status": "failed", "error": "x"}, "ext_proc": mode_result([sample(0, 250)])}
    rp.add_overheads(modes)
    assert modes["ext_proc"]["overhead_vs_direct"] is None


def test_representative_is_the_complete_success_nearest_the_median():
    samples = [sample(0, 100), sample(1, 300, complete=False), sample(2, 210), sample(3, 400), sample(4, 0, error="x")]
    assert rp.representative(samples)["index"] == 2  # median of complete successes (100, 210, 400) is 210
    assert rp.representative([sample(0, 0, error="x")]) is None


# -- baseline -------------------------------------------------------------------------------------------

def _two_runs():
    base = report_with({"direct": mode_result([sample(i, 250, gateway=0.2) for i in range(4)]),
                        "ext_proc": mode_result([sample(i, 250, gateway=3.0, decision=0.2, roundtrip=2.5) for i in range(4)])})
    return base, copy.deepcopy(base)


def test_same_numbers_are_no_regression():
    base, now = _two_runs()
    assert rp.compare_to_baseline(now, base) == []


def test_latency_regression_needs_both_the_fraction_and_the_floor():
    base, now = _two_runs()
    steps = now["scenarios"]["chat"]["modes"]["ext_proc"]["steps"]
    steps["gateway"]["p50"] = 4.5  # +50 % but only +1.5 ms: under the 2 ms floor
    steps["e2e"]["p90"] = 400.0  # +60 % and +150 ms
    found = rp.compare_to_baseline(now, base, threshold=0.25, floor_ms=2.0)
    assert [(r["mode"], r["metric"]) for r in found] == [("ext_proc", "e2e.p90_ms")]
    assert found[0]["change"] == pytest.approx(0.6)
    assert [r["metric"] for r in rp.compare_to_baseline(now, base, floor_ms=1.0)] == ["e2e.p90_ms", "gateway.p50_ms"]


def test_errors_completeness_throughput_and_a_failed_mode_are_regressions():
    base, now = _two_runs()
    m = now["scenarios"]["chat"]["modes"]
    m["direct"]["error_rate"] = 0.25
    m["direct"]["completeness"]["ratio"] = 0.75
    m["direct"]["throughput"]["requests_per_s"] = 1.0  # from 2.0
    m["ext_proc"] = {"status": "failed", "error": "EPP did not start"}
    found = {(r["mode"], r["metric"]) for r in rp.compare_to_baseline(now, base)}
    assert found == {("direct", "error_rate"), ("direct", "completeness"), ("direct", "requests_per_s"),
                     ("ext_proc", "status")}


def test_modes_and_scenarios_missing_from_the_baseline_are_skipped():
    base, now = _two_runs()
    del base["scenarios"]["chat"]["modes"]["ext_proc"]
    now["scenarios"]["chat"]["modes"]["ext_proc"]["steps"]["e2e"]["p50"] = 9999.0
    now["scenarios"]["stream"] = now["scenarios"]["chat"]
    assert rp.compare_to_baseline(now, base) == []


def test_load_refuses_a_file_that_is_not_a_report(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ValueError, match="not an eppkit compare report"):
        rp.load(path)


# -- text and folder ---------------------------------------------------------------------------------------

def test_table_and_markdown_show_every_mode_including_a_failed_one():
    base, now = _two_runs()
    now["scenarios"]["chat"]["modes"]["sidecar"] = {"status": "failed", "error": "TimeoutError: frontend never ready\nmore",
                                                    "log_file": "logs/chat-sidecar.log"}
    now["baseline"] = {"file": "old.json", "threshold": 0.25, "floor_ms": 2.0,
                       "regressions": [{"scenario": "chat", "mode": "direct", "metric": "e2e.p50_ms", "baseline": 1.0,
                                        "current": 2.0, "change": 1.0, "rule": "r"}]}
    table = rp.format_table(now)
    lines = table.splitlines()
    assert any(l.startswith("direct ") and " ok " in l for l in lines)
    assert any(l.startswith("sidecar ") and "FAILED" in l and "frontend never ready" in l for l in lines)
    assert "REGRESSIONS against old.json" in table and "chat/direct e2e.p50_ms: 1.0 -> 2.0 (+100%)" in table
    md = rp.render_markdown(now)
    assert "| ext_proc | ok | 4/4 |" in md
    assert "## Modes that failed to run" in md and "logs/chat-sidecar.log" in md
    assert "**1 regression(s)**" in md


def test_markdown_names_the_scorer_and_the_mocks_latency_from_the_config():
    _, now = _two_runs()
    now["config"] = {**now.get("config", {}), "scorer": "prefix-cache-scorer", "scorer_parameters": {"hashBlockSize": 8},
                     "latency": {"time_to_first_token": 40.0, "inter_token_latency": 5.0,
                                 "kv_cache_transfer_latency": 20.0}, "encode_latency": 50.0}
    first = rp.render_markdown(now).splitlines()[2]
    assert 'Scorer of every picker mode: `prefix-cache-scorer` {"hashBlockSize": 8}' in first
    assert "TTFT 40.0 ms, ITL 5.0 ms, KV transfer 20.0 ms, encode 50.0 ms per item" in first


def test_write_makes_json_markdown_charts_and_a_waterfall_from_the_saved_trace(tmp_path):
    modes = {"direct": mode_result([sample(i, 250 + i) for i in range(5)]),
             "ext_proc": mode_result([sample(i, 255 + i, gateway=4.0, decision=0.2, roundtrip=3.0) for i in range(5)])}
    report = report_with(modes)
    trace_file = "traces/chat-ext_proc-x.json"
    (tmp_path / "traces").mkdir()
    shutil.copy(DATA / "chat-ext_proc.json", tmp_path / trace_file)
    modes["ext_proc"]["representative"] = {"trace_id": "x", "e2e_ms": 244.1, "file": trace_file,
                                           "jaeger_url": "http://127.0.0.1:1/api/traces/x"}
    paths = output.write(report, tmp_path)
    for name in ("latency-chat", "steps-chat", "waterfall-chat-ext_proc"):
        for suffix in (".png", ".svg"):
            assert (tmp_path / f"{name}{suffix}").stat().st_size > 5000, name + suffix
    assert not (tmp_path / "waterfall-chat-direct.png").exists(), "no saved trace, no waterfall"
    saved = json.loads(paths["json"].read_text())
    assert saved["schema"] == rp.SCHEMA
    assert saved["scenarios"]["chat"]["charts"] == {"latency": "latency-chat.png", "steps": "steps-chat.png"}
    md = paths["markdown"].read_text()
    assert "![latency](latency-chat.png)" in md
    assert f"[saved trace JSON]({trace_file})" in md and "[waterfall](waterfall-chat-ext_proc.png)" in md
    assert rp.load_trace(tmp_path / trace_file).one(Epp.PICK).service == "epp"
