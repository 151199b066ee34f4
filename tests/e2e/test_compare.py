"""`eppkit compare` end to end: a small seeded workload through every mode, then the report's numbers
checked against the spans in Jaeger, read independently of the code that computed them."""

import json
import re
import statistics
import sys
from pathlib import Path

import pytest
from eppkit.observability.contract import Callout, Client, EchoEpp, Epp, Eppkit, Frontend, Service, Stream, Vllm
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.services.vllm.config import MockLatency
from eppkit.services.epp import BODY_PATHS

from eppkit import compare
from eppkit.backends import SIM, Backend
from eppkit.builds import inference_perf
from eppkit.compare import output
from eppkit.compare import report as rp
from eppkit.modes import kit_names
from eppkit.pytest_plugin.session import require_simulator
from eppkit.pytest_plugin.state import require
from eppkit.workload import Load
from tests.support import chromium as _chromium

pytestmark = pytest.mark.e2e

MODES = kit_names()
REQUESTS = 3
# The deciding span per mode, spelled out here rather than taken from observability.expected_spans.
DECISION = {"ext_proc": Epp.PICK, "sidecar": Frontend.ROUTE,
            "lua-callout": Callout.PICK, "dynmod-callout": Callout.PICK}


def _run(tmp_path, jaeger, runtime, **kw):
    """compare with 3 requests per mode; the floors only where a test asks for them (they are judged on their own)."""
    kw.setdefault("floors", False)
    options = compare.CompareOptions(load=Load(requests=REQUESTS, concurrency=2, warmup=1), runtime=runtime,
                                     latency=MockLatency(time_to_first_token=50, inter_token_latency=5),
                                     trace_timeout_s=20, **kw)
    out = tmp_path / "report"
    report = compare.run(options, out, jaeger=jaeger)
    output.write(report, out)
    return report, out


def _ms(spans):
    return [s.duration_us / 1000 for s in spans]


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_compare_numbers_are_the_spans_numbers_for_every_mode(tmp_path, eppkit_jaeger, eppkit_runtime):
    report, out = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=MODES, scenarios=("chat",))
    modes = report["scenarios"]["chat"]["modes"]
    failed = {m: r["error"] for m, r in modes.items() if r["status"] != "ok"}
    assert not failed, f"modes failed to run (logs under {out}/logs): {failed}"
    api = JaegerClient(eppkit_jaeger.api_url)

    for mode, result in modes.items():
        assert result["requests"] == {"planned": REQUESTS, "sent": REQUESTS, "ok": REQUESTS, "failed": 0}, mode
        assert result["errors"] == {}, mode
        assert result["completeness"]["ratio"] == 1.0, (mode, result["completeness"])

        traces = [api.get_trace(s["trace_id"]) for s in result["samples"]]
        assert len({t.trace_id for t in traces}) == REQUESTS
        roots = [t.one(Client.REQUEST, Service.CLIENT) for t in traces]
        assert all(r.attributes[Eppkit.MODE] == mode for r in roots), "each trace belongs to the mode it is filed under"
        steps = result["steps"]
        assert steps["e2e"]["p50"] == pytest.approx(statistics.median(_ms(roots)), abs=1e-3), mode
        prefill = [sum(_ms(t.find_all(Vllm.PREFILL, Service.VLLM))) for t in traces]
        assert steps["prefill"]["p50"] == pytest.approx(statistics.median(prefill), abs=1e-3), mode
        if mode == "direct":
            assert "decision" not in steps and "roundtrip" not in steps and result["scorer"] is None
            continue
        # The same scorer decides in every picker mode (recorded per mode), so differences are the wiring's.
        assert result["scorer"] == report["config"]["scorer"] == "queue-scorer", mode
        decisions = [t.one(DECISION[mode]).duration_us / 1000 for t in traces]
        assert steps["decision"]["p50"] == pytest.approx(statistics.median(decisions), abs=1e-3), mode
        assert steps["decision"]["p99"] <= max(decisions) + 1e-3
        # the picker costs something before the upstream, compared with direct
        assert result["overhead_vs_direct"]["gateway"]["p50"] > 0, mode

        rep = result["representative"]
        saved = rp.load_trace(out / rep["file"])  # OTLP JSON, as Jaeger's /api/v3 answers
        assert saved.trace_id == rep["trace_id"] and rep["trace_id"] in {s["trace_id"] for s in result["samples"]}
        assert (out / rep["waterfall"]).is_file()

    assert rp.load(out / "report.json")["scenarios"]["chat"]["modes"].keys() == set(MODES)
    summary = (out / "summary.md").read_text()
    assert all(f"| {mode} | ok |" in summary for mode in MODES)
    assert (out / "latency-chat.png").is_file() and (out / "steps-chat.svg").is_file()

    # report.html in a browser: each mode's representative trace is a waterfall holding every one of its spans
    page = (out / "report.html").as_uri()
    dom = _chromium.dump_dom(page)
    assert 'data-ready="true"' in dom, "the page's script ran"
    drawn = sorted(re.findall(r'<details class="span[^"]*" data-span-id="([0-9a-f]+)"', dom))
    saved = [rp.load_trace(out / r["representative"]["file"]) for r in modes.values()]
    assert drawn == sorted(s.span_id for t in saved for s in t.spans)
    _chromium.screenshot(page, out / "report.png")


def test_each_picker_mode_runs_beside_its_floor_and_the_report_splits_its_cost(tmp_path, eppkit_jaeger, eppkit_runtime):
    """Each transport's floor (eppkit/floors: a Go server that picks at once) runs the same requests through the same
    wiring: its traces hold Envoy's call and no picker span, every request served, and each mode's share over it is
    in the report and the table."""
    picking = ("ext_proc", "sidecar", "lua-callout", "dynmod-callout")
    report, out = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=("direct", *picking), scenarios=("chat",),
                       floors=True)
    results = report["scenarios"]["chat"]["modes"]
    assert list(results) == ["direct", "ext_proc", "floor-ext_proc", "sidecar", "floor-sidecar", "lua-callout",
                             "floor-lua-callout", "dynmod-callout", "floor-dynmod-callout"]
    failed = {m: r["error"] for m, r in results.items() if r["status"] != "ok"}
    assert not failed, f"modes failed to run (logs under {out}/logs): {failed}"
    api = JaegerClient(eppkit_jaeger.api_url)
    for mode in picking:
        key = results[mode]["floor"]
        floor = results[key]
        assert floor["scorer"] == "floor" and floor["requests"]["ok"] == REQUESTS, (key, floor["requests"])
        assert floor["completeness"]["ratio"] == 1.0, (key, floor["completeness"])
        for sample in floor["samples"]:  # Envoy called the floor; the floor, a program of its own, traced nothing
            services = {s.service for s in api.get_trace(sample["trace_id"]).spans}
            assert not services & {Service.EPP, Service.CALLOUT, Service.FRONTEND}, (key, services)
        over = results[mode]["over_floor"]["gateway"]["p50"]
        assert over == pytest.approx(results[mode]["steps"]["gateway"]["p50"] - floor["steps"]["gateway"]["p50"],
                                     abs=1e-3)
    assert "floor" not in results["direct"]
    table = rp.format_table(report)
    assert "picker share" in table and f"({results['lua-callout']['floor']})" in table


def _most_in_flight(samples):
    """The most requests the client had open at once, from each sample's send time and duration."""
    edges = sorted([(s["sent_s"], 1) for s in samples] + [(s["sent_s"] + s["e2e_ms"] / 1000, -1) for s in samples],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_concurrency_sweep_runs_every_mode_and_floor_at_each_step_in_one_run(tmp_path, eppkit_jaeger, eppkit_runtime):
    """--concurrency-sweep 1,3: each mode and its floor once per step, in testbeds of their own, each driven at its
    step's concurrency (the client's own send times say so), every request served, tabulated and drawn."""
    report, out = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=("direct", "ext_proc"), scenarios=("chat",),
                       floors=True, concurrency_sweep=(1, 3))
    block = report["scenarios"]["chat"]
    results = block["modes"]
    assert list(results) == ["direct@c1", "direct@c3", "ext_proc@c1", "floor-ext_proc@c1", "ext_proc@c3",
                             "floor-ext_proc@c3"]
    failed = {m: r["error"] for m, r in results.items() if r["status"] != "ok"}
    assert not failed, f"runs failed (logs under {out}/logs): {failed}"
    for key, result in results.items():
        assert result["requests"]["ok"] == REQUESTS, (key, result["requests"])
        assert _most_in_flight(result["samples"]) == (1 if key.endswith("@c1") else REQUESTS), key
    assert results["ext_proc@c3"]["floor"] == "floor-ext_proc@c3"
    assert results["ext_proc@c3"]["overhead_vs_direct"]  # against direct at the same step
    table = next(t for t in rp.extra_tables(report, block) if t.title.startswith("Per concurrency"))
    assert [row[0] for row in table.rows] == ["1", "3"] and table.columns[1:] == ("direct", "ext_proc", "floor-ext_proc")
    assert (out / "concurrency-chat.png").is_file() and "Per concurrency" in (out / "summary.md").read_text()


def test_each_body_path_runs_beside_its_floor_and_prompt_sizes_draw_the_curve(tmp_path, eppkit_jaeger, eppkit_runtime):
    """ext_proc with the body streamed, buffered and not sent, each beside its floor, through prompts of 1 to 256 KiB:
    every request served, Envoy's own record says how the body went (no body replies when none is sent), and the
    report holds a point per size for each run."""
    options = compare.CompareOptions(modes=("ext_proc",), scenarios=("prompt-sizes",), body_paths=BODY_PATHS,
                                     load=Load(requests=5, concurrency=1, warmup=1), runtime=eppkit_runtime,
                                     latency=MockLatency(time_to_first_token=50, inter_token_latency=5),
                                     trace_timeout_s=20, floors=True)
    out = tmp_path / "report"
    report = compare.run(options, out, jaeger=eppkit_jaeger)
    output.write(report, out)
    results = report["scenarios"]["prompt-sizes"]["modes"]
    assert list(results) == ["ext_proc", "floor-ext_proc", "ext_proc+buffered", "floor-ext_proc+buffered",
                             "ext_proc+none", "floor-ext_proc+none"]
    failed = {m: r["error"] for m, r in results.items() if r["status"] != "ok"}
    assert not failed, f"runs failed (logs under {out}/logs): {failed}"
    for key, result in results.items():
        assert result["requests"]["ok"] == 5 and result["completeness"]["ratio"] == 1.0, (key, result["requests"])
        curve = result["by_prompt_kb"]
        assert [p["kb"] for p in curve] == [1, 4, 16, 64, 256], (key, curve)
        assert all(p["requests"] == 1 and p["ttft"] and p["hold"] is not None for p in curve), (key, curve)
    # Envoy's per-phase record: the EPP answered body messages when the body went to it, none when it did not.
    assert {k for k, r in results.items() if "epp_release" in r["hop"]} == {
        "ext_proc", "floor-ext_proc", "ext_proc+buffered", "floor-ext_proc+buffered"}
    assert results["ext_proc+none"]["floor"] == "floor-ext_proc+none" and results["ext_proc+none"]["body_path"] == "none"
    summary = (out / "summary.md").read_text()
    assert "Per prompt size" in summary and "| 256 KiB |" in summary
    assert (out / "prompt-sizes-prompt-sizes.svg").is_file()


def test_the_prefix_cache_table_shows_where_a_kv_aware_picker_sent_shared_prefixes(tmp_path, eppkit_jaeger,
                                                                                      eppkit_runtime):
    """Conversations sharing system prompts through ext_proc, once with kv-events-scorer (the pods' KV events), once
    with round-robin: the pods' own prefill spans say how much of each prompt they already held."""
    rates = {}
    for scorer in ("kv-events-scorer", "round-robin"):
        options = compare.CompareOptions(modes=("ext_proc",), scenarios=("shared-prefix",), scorer=scorer, backends=3,
                                         load=Load(requests=16, concurrency=1, warmup=0), runtime=eppkit_runtime,
                                         latency=MockLatency(time_to_first_token=5, inter_token_latency=1),
                                         trace_timeout_s=20, floors=False)
        out = tmp_path / scorer
        report = compare.run(options, out, jaeger=eppkit_jaeger)
        output.write(report, out)
        result = report["scenarios"]["shared-prefix"]["modes"]["ext_proc"]
        assert result["status"] == "ok" and result["requests"]["ok"] == 16, (result.get("error"), result["requests"])
        cache = result["prefix_cache"]
        assert cache["requests"] == 16 and cache["prompt_tokens"] > 16 * 300, cache
        rates[scorer] = cache["ratio"]
        assert "Prefix cache, from the pods' prefill spans" in (out / "summary.md").read_text()
        if scorer == "kv-events-scorer":  # it says what it expects the pod to hold; the pods found exactly that
            assert cache["predicted_requests"] == 16 and cache["as_predicted"] == 16, cache
            assert cache["predicted_tokens"] == cache["cached_tokens"], cache
        else:  # round robin predicts nothing
            assert "predicted_tokens" not in cache, cache
    # 4 conversations on 3 pods: the KV-aware picker misses each conversation's first request only (4 of 16); round
    # robin sends each conversation to each pod once before any hit (12 of 16 miss).
    assert rates["kv-events-scorer"] > 0.6 and rates["round-robin"] < 0.35, rates


def test_compare_with_the_simulator_is_complete_and_labelled_external(tmp_path, eppkit_jaeger, eppkit_runtime):
    require_simulator()
    report, out = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=MODES, scenarios=("stream",),
                       backend=Backend(preset=SIM))
    assert report["backend"] == {"label": Backend(preset=SIM).label, "external": True, "spans": "none"}
    assert "external: llm-d-inference-sim" in (out / "summary.md").read_text()
    for mode, result in report["scenarios"]["stream"]["modes"].items():
        assert result["status"] == "ok", (mode, result.get("error"), out)
        assert result["requests"]["ok"] == REQUESTS and result["completeness"]["ratio"] == 1.0, (mode, result)
        steps = result["steps"]
        assert {"gateway", "ttft", "e2e"} <= set(steps), (mode, steps)
        assert ("decision" in steps and "roundtrip" in steps) == (mode != "direct"), (mode, steps)
        assert not {"queue", "prefill", "kv", "decode"} & set(steps), "the simulator traces none of its steps"


def test_when_pods_evict_only_the_picker_that_hears_it_keeps_its_predictions(tmp_path, eppkit_jaeger, eppkit_runtime):
    """shared-prefix-evicting: 8 conversations on 3 pods of 64 KV blocks each. kv-events-scorer hears each pod's
    BlockRemoved: every request's pod found exactly what it predicted (its span's eppkit.kv.predicted_cached_tokens
    against the pod's vllm.prefix_cached_tokens). prefix-cache-scorer remembers where it sent each conversation, not
    what the pods still hold: fewer hits. (Without evictions the two hit alike: the shared-prefix scenario.)"""
    caches = {}
    for scorer in ("kv-events-scorer", "prefix-cache-scorer"):
        options = compare.CompareOptions(modes=("ext_proc",), scenarios=("shared-prefix-evicting",), scorer=scorer,
                                         backends=3, load=Load(requests=32, concurrency=1, warmup=0),
                                         runtime=eppkit_runtime, trace_timeout_s=20, floors=False, charts=False,
                                         latency=MockLatency(time_to_first_token=5, inter_token_latency=1))
        report = compare.run(options, tmp_path / scorer, jaeger=eppkit_jaeger)
        result = report["scenarios"]["shared-prefix-evicting"]["modes"]["ext_proc"]
        assert result["status"] == "ok" and result["requests"]["ok"] == 32, (result.get("error"), result["requests"])
        caches[scorer] = result["prefix_cache"]
    precise, remembered = caches["kv-events-scorer"], caches["prefix-cache-scorer"]
    assert precise["as_predicted"] == precise["predicted_requests"] == 32, precise
    assert precise["ratio"] > remembered["ratio"] + 0.1, (precise, remembered)


def test_streamed_ttft_is_the_client_first_token_event(tmp_path, eppkit_jaeger, eppkit_runtime):
    report, _ = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=("direct", "ext_proc"), scenarios=("stream",))
    api = JaegerClient(eppkit_jaeger.api_url)
    for mode, result in report["scenarios"]["stream"]["modes"].items():
        assert result["status"] == "ok", result.get("error")
        assert result["completeness"]["ratio"] == 1.0
        ttfts = []
        for s in result["samples"]:
            root = api.get_trace(s["trace_id"]).one(Client.REQUEST, Service.CLIENT)
            ttfts.append((root.event(Stream.FIRST_TOKEN).time_us - root.start_us) / 1000)
            assert s["ttft_ms"] == pytest.approx(ttfts[-1], abs=0.01), "client clock and span event agree"
        assert result["steps"]["ttft"]["p50"] == pytest.approx(statistics.median(ttfts), abs=1e-3)
        assert 50 <= result["steps"]["ttft"]["p50"] < result["steps"]["e2e"]["p50"]


@pytest.mark.eppkit_alone("both tools' ITL within 10 % of the mock's 10 ms, their TTFT within 25 ms")
@pytest.mark.eppkit_needs_mock("holds the load tool's inter-token latency against the mock's configured one")
def test_inference_perf_sends_the_same_requests_and_agrees_with_the_kit(tmp_path, eppkit_jaeger, eppkit_runtime):
    """The CI cross-check: inference-perf drives each mode's testbed with the kit's requests: the same requests and
    tokens, both tools' TTFT p50 close, and both ITL means within 10 % of the mock's configured 10 ms. A check of
    the measurement, not a speed target."""
    require(inference_perf.find() is not None, inference_perf.missing())
    requests, itl = 24, MockLatency().inter_token_latency
    # two in flight: each tool's client is then light on the two cores it shares with Envoy, the EPP and the mocks
    options = compare.CompareOptions(modes=("direct", "ext_proc"), scenarios=("stream",),
                                     load=Load(requests=requests, concurrency=2, warmup=1), runtime=eppkit_runtime,
                                     trace_timeout_s=20, floors=False,
                                     load_tool=inference_perf.NAME)
    out = tmp_path / "report"
    report = compare.run(options, out, jaeger=eppkit_jaeger)
    output.write(report, out, charts=False)
    for mode, result in report["scenarios"]["stream"]["modes"].items():
        assert result["status"] == "ok", (mode, result.get("error"))
        checked = result["load_tool"]
        assert checked["status"] == "ok", (mode, checked.get("error") or checked.get("reason"))
        # the tool's own summary, read here rather than through the report's copy of it
        summary = json.loads((out / "load-tool" / f"stream-{mode}" / "reports" / "summary_lifecycle_metrics.json")
                             .read_text())["successes"]
        assert summary["count"] == requests and summary["token_count_mismatches"] == 0, mode
        assert summary["output_tokens"]["total"] == sum(s["tokens"] for s in result["samples"]), "the same requests"
        kit_ttft, tool_ttft = result["steps"]["ttft"]["p50"], summary["latency"]["time_to_first_token"]["median"] * 1000
        # The report marks a TTFT further apart than max(5 ms, 5 %) (both clients' own time on two busy cores);
        # the test holds a bound no load on this machine reached (19 ms apart at load 49) that still fails a
        # tool reading the role-only first chunk as the first token (the mock's TTFT, 100 ms, apart).
        assert abs(kit_ttft - tool_ttft) <= max(25.0, 0.2 * kit_ttft), (mode, kit_ttft, tool_ttft)
        kit_itl = statistics.mean(gap for s in result["samples"] for gap in s["itl_ms"])
        tool_itl = summary["latency"]["inter_token_latency"]["mean"] * 1000
        assert abs(kit_itl - itl) <= 0.1 * itl and abs(tool_itl - itl) <= 0.1 * itl, (mode, kit_itl, tool_itl)
        assert checked["traced"]["envoy_rooted_traces"] == requests, "Envoy started a trace for each of its requests"
    summary_md = (out / "summary.md").read_text()
    assert f"Cross-check: the same requests sent by {inference_perf.NAME}" in summary_md


@pytest.mark.eppkit_prepare("gaie-epp")
def test_compare_of_three_epps_shows_each_decision_and_the_hop_phase_by_phase(tmp_path, eppkit_jaeger, eppkit_runtime):
    """The kit's EPP, GAIE's and one of your own (the echo EPP, its decision span named): every mode has a
    decision where one is named, and Envoy's per-phase record of the hop (an EPP need not trace for that)."""
    echo = f"{sys.executable} -m eppkit.services.echo_epp --port {{grpc_port}} --endpoints {{endpoints}}"
    modes = ("ext_proc", "gaie-epp", "external-epp")
    report, out = _run(tmp_path, eppkit_jaeger, eppkit_runtime, modes=modes, scenarios=("chat",),
                       mode_sets={"external-epp": {"epp_command": echo,
                                                   "decision_span": f"echo-epp:{EchoEpp.PROCESS}"}})
    results = report["scenarios"]["chat"]["modes"]
    failed = {m: r["error"] for m, r in results.items() if r["status"] != "ok"}
    assert not failed, f"modes failed to run (logs under {out}/logs): {failed}"
    for mode in modes:
        steps, hop = results[mode]["steps"], results[mode]["hop"]
        if mode != "gaie-epp":  # GAIE's EPP v1.5.0 names no decision span the kit knows
            assert steps["decision"]["n"] == REQUESTS, (mode, steps.keys())
        for phase in ("upload", "hold", "epp_decision", "epp_release", "upstream", "response"):
            assert hop[phase]["n"] == REQUESTS, (mode, phase, hop.keys())
        for sample in results[mode]["samples"]:
            if sample.get("ok"):  # the upstream starts after the decision: Envoy held the request for it
                phases = sample["hop"]
                assert phases["upload"] + phases["hold"] + 0.2 >= phases["epp_decision"], (mode, phases)
    modes_shown, rows = rp.hop_table(report["scenarios"]["chat"])
    assert modes_shown == list(modes) and {row[0] for row in rows} >= {"hold", "epp_decision"}
    assert "epp_decision" in (out / "summary.md").read_text()


def _envoy_lines(run_dir) -> dict[str, dict]:
    """Envoy's own record of each request of a testbed (its access log's JSON lines), by trace id."""
    lines = [json.loads(line) for line in (run_dir / "envoy.log").read_text().splitlines()
             if line.startswith("{") and '"eppkit_hop"' in line]
    return {line["traceparent"].split("-")[1]: line for line in lines if line.get("traceparent")}


@pytest.mark.eppkit_needs_mock("drives the mock past its --max-num-seqs; measured against it only")
def test_saturated_pods_shed_the_sheddable_band_where_queueing_serves_it_and_the_critical_band_first(
        tmp_path, eppkit_jaeger, eppkit_runtime):
    """The saturated scenario through the kit's EPP shedding and queueing: 60 requests each, 24 in flight on two pods
    that run 2 at a time, a critical (1) and a sheddable (-1) band in turn. Judged from the client's statuses and
    Envoy's own access log (read here, not through the report): shedding answers sheddable requests 429 from the EPP
    and never a critical one; queueing drops fewer of them and holds the sheddable band in the EPP longer than the
    critical one, whose TTFT is then lower than shedding's (the pods' queues stay at GAIE's threshold, not full of
    critical requests)."""
    options = compare.CompareOptions(modes=("ext_proc",), scenarios=("saturated",), runtime=eppkit_runtime,
                                     load=Load(requests=60, warmup=1), trace_timeout_s=20, floors=False, charts=False)
    out = tmp_path / "report"
    report = compare.run(options, out, jaeger=eppkit_jaeger)
    output.write(report, out, charts=False)
    block = report["scenarios"]["saturated"]
    results = block["modes"]
    assert list(results) == ["ext_proc", "ext_proc+queueing"] and block["workload"]["concurrency"] == 24
    failed = {m: r["error"] for m, r in results.items() if r["status"] != "ok"}
    assert not failed, f"runs failed (logs under {out}/logs): {failed}"
    seen = {}
    for key, result in results.items():
        envoy = _envoy_lines(Path(result["run_dir"]))
        by_band = {"critical": [], "sheddable": []}
        for s in result["samples"]:
            line = envoy[s["trace_id"]]
            assert line["code"] == s["status"], (key, s["index"], line, s["status"])
            by_band[s["band"]].append((s, line))
        seen[key] = by_band
        assert all(len(pairs) == 30 for pairs in by_band.values()), (key, result["requests"])
    shedding, queueing = seen["ext_proc"], seen["ext_proc+queueing"]

    def dropped(pairs):
        return [line for s, line in pairs if s["status"] != 200]

    shed = dropped(shedding["sheddable"])
    assert shed, "the pods were saturated, yet the EPP shed no sheddable request"
    assert all(line["code"] == 429 and line["upstream"] is None and line["details"] == "epp_shed"
               and line["ext_proc"]["received_immediate_response"] for line in shed), shed[:2]
    assert not dropped(shedding["critical"]) and not dropped(queueing["critical"]), "a priority of 0 or more"
    assert len(dropped(queueing["sheddable"])) < len(shed), (len(dropped(queueing["sheddable"])), len(shed))

    def hold_ms(pairs):  # what Envoy waited for the EPP before the upstream (the queue in the EPP)
        return statistics.median((line["upstream_start_us"] - line["request_end_us"]) / 1000
                                 for s, line in pairs if line["upstream_start_us"] is not None)

    def ttft_ms(pairs):
        return statistics.median(s["ttft_ms"] for s, _ in pairs if s["status"] == 200)

    assert hold_ms(queueing["sheddable"]) > hold_ms(queueing["critical"]), "the critical band goes first"
    assert ttft_ms(queueing["critical"]) < ttft_ms(shedding["critical"]), (
        ttft_ms(queueing["critical"]), ttft_ms(shedding["critical"]))
    assert "Per priority band" in (out / "summary.md").read_text()
