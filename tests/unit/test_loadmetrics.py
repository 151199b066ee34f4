"""What load tools report, from the kit's samples: ITL pooled over token gaps, TPOT per request, goodput at an SLO,
the baseline gates on them, and the table in every form of the report."""

import copy
import json
from pathlib import Path

import pytest

from eppkit.compare import loadmetrics as lm
from eppkit.compare import output
from eppkit.compare import report as rp
from tests.support.report_samples import mode_result, report_with, sample

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "loadtool"
SLO = lm.Slo.parse("ttft=200ms,tpot=20ms")


def streamed(i, *, ttft, gaps, error=None):
    """A streamed request's sample: TTFT from its trace, one arrival gap per token after the first."""
    s = sample(i, ttft + sum(gaps), error=error, tokens=len(gaps) + 1)
    if error is None:
        s["steps"]["ttft"] = ttft
        s.update(itl_ms=list(gaps), tpot_ms=sum(gaps) / len(gaps))
    return s


@pytest.mark.parametrize("text, limits", [
    ("ttft=200ms,tpot=20ms", (("ttft", 200.0), ("tpot", 20.0))),
    ("ttft=0.5s, e2e = 2000", (("ttft", 500.0), ("e2e", 2000.0))),  # seconds, spaces, a bare number is ms
    ("tpot<=15ms", (("tpot", 15.0),)),
    ("none", ()),
    ("", ()),
])
def test_an_slo_is_read_in_ms_or_s(text, limits):
    assert lm.Slo.parse(text).limits == limits


@pytest.mark.parametrize("text, said", [
    ("ttft=fast", "cannot read 'ttft=fast'"),
    ("latency=200ms", "unknown limit 'latency'; choose from ttft, tpot, e2e"),
    ("ttft=1s,ttft=2s", "ttft given twice"),
])
def test_a_bad_slo_is_refused_naming_what_is_wrong(text, said):
    with pytest.raises(ValueError, match=said):
        lm.Slo.parse(text)


def test_itl_pools_every_gap_and_tpot_is_per_request():
    samples = [streamed(0, ttft=100, gaps=[10, 10, 10, 10]), streamed(1, ttft=100, gaps=[30]),
               streamed(2, ttft=0, gaps=[], error="timeout")]
    figures = lm.summarize(samples, wall_s=1.0, slo=SLO)
    assert figures["itl"]["n"] == 5 and figures["itl"]["mean"] == 14.0  # token-weighted: (4 x 10 + 30) / 5
    assert figures["itl"]["p50"] == 10.0
    assert figures["tpot"]["n"] == 2 and figures["tpot"]["mean"] == 20.0  # request-weighted: (10 + 30) / 2


def test_goodput_counts_failed_requests_as_missed_and_says_which_limit_was_met():
    samples = [streamed(0, ttft=100, gaps=[10, 10]),  # good
               streamed(1, ttft=250, gaps=[10, 10]),  # TTFT over 200
               streamed(2, ttft=100, gaps=[25, 25]),  # TPOT over 20
               streamed(3, ttft=0, gaps=[], error="http_503")]
    good = lm.goodput(samples, SLO, wall_s=2.0)
    assert good["good"] == 1 and good["sent"] == 4 and good["ratio"] == 0.25 and good["requests_per_s"] == 0.5
    assert good["attainment"] == {"ttft": 0.5, "tpot": 0.5}
    assert good["slo"] == {"ttft": 200.0, "tpot": 20.0}


def test_goodput_is_not_measured_when_the_answers_were_not_streamed():
    samples = [sample(i, 250) for i in range(3)]  # no TTFT, no token gaps
    good = lm.goodput(samples, SLO, wall_s=1.0)
    assert good["ratio"] is None and good["why"] == "ttft, tpot not measured: the answers were not streamed"
    assert lm.goodput(samples, lm.Slo.parse("e2e=300ms"), wall_s=1.0)["ratio"] == 1.0  # e2e is measured anyway
    assert lm.goodput(samples, lm.Slo(), wall_s=1.0) is None


def test_ttft_comes_from_the_trace_and_falls_back_to_the_client():
    s = streamed(0, ttft=150, gaps=[10])
    s["ttft_ms"] = 999.0
    assert lm.goodput([s], SLO, wall_s=1.0)["good"] == 1  # the trace's 150 ms, not the client's field
    del s["steps"]["ttft"]
    assert lm.goodput([s], SLO, wall_s=1.0)["good"] == 0  # no trace: the client's 999 ms


def _with_figures(samples, wall_s=2.0):
    result = mode_result(samples, wall_s=wall_s)
    result["load_metrics"] = lm.summarize(samples, wall_s=wall_s, slo=SLO)
    return result


def test_the_baseline_gates_itl_tpot_tokens_per_second_and_goodput():
    fast = [streamed(i, ttft=100, gaps=[10] * 9) for i in range(4)]
    slow = [streamed(i, ttft=100, gaps=[10] * 5 + [40] * 4) for i in range(4)]  # ITL p90 and TPOT grow
    base = report_with({"direct": _with_figures(fast)}, scenario="stream")
    now = report_with({"direct": _with_figures(slow, wall_s=4.0)}, scenario="stream")
    for report in (base, now):
        report["scenarios"]["stream"]["modes"]["direct"]["throughput"]["requests_per_s"] = None  # gated elsewhere
    metrics = {r["metric"]: r for r in rp.compare_to_baseline(now, base)}
    assert {"itl.p90_ms", "tpot.p50_ms", "tpot.p90_ms", "output_tokens_per_s",
            "goodput[ttft ≤ 200 ms, tpot ≤ 20 ms]"} == set(metrics) - {"e2e.p50_ms", "e2e.p90_ms"}
    assert metrics["goodput[ttft ≤ 200 ms, tpot ≤ 20 ms]"]["current"] == 0.0
    assert rp.compare_to_baseline(base, base) == []


def test_goodput_under_another_objective_is_not_compared():
    samples = [streamed(i, ttft=100, gaps=[10, 10]) for i in range(3)]
    base = report_with({"direct": _with_figures(samples)})
    now = copy.deepcopy(base)
    figures = now["scenarios"]["chat"]["modes"]["direct"]["load_metrics"]
    figures["goodput"] = lm.goodput(samples, lm.Slo.parse("ttft=50ms"), wall_s=2.0)
    assert figures["goodput"]["ratio"] == 0.0
    assert rp.compare_to_baseline(now, base) == []


def test_every_form_of_the_report_shows_the_figures(tmp_path):
    report = report_with({"direct": _with_figures([streamed(i, ttft=100, gaps=[10, 12]) for i in range(3)]),
                          "ext_proc": {"status": "failed", "error": "boom"}}, scenario="stream")
    report["config"]["slo"] = "ttft=200ms,tpot=20ms"
    console = rp.format_table(report)
    assert "ITL p50" in console and "TPOT p50" in console and "goodput" in console
    (row,) = [line.split() for line in console.splitlines() if line.strip().startswith("direct") and "11.00" in line]
    assert row[1] == "11.00" and row[-2] == "100%", row  # ITL p50 of gaps 10, 12; every request met the objective
    paths = output.write(report, tmp_path, charts=False)
    md = paths["markdown"].read_text()
    assert "| mode | ITL p50 | p90 | p99 | ITL mean | TPOT p50 |" in md
    assert "ttft ≤ 200 ms, tpot ≤ 20 ms" in md
    assert "<th>ITL p50</th>" in paths["html"].read_text()


def test_a_report_of_an_older_eppkit_has_no_load_table():
    old = json.loads((DATA / "kit-stream-direct.json").read_text())
    del old["load_metrics"]
    report = report_with({"direct": old}, scenario="stream")
    assert "ITL p50" not in rp.format_table(report)
