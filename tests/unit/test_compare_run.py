"""`eppkit compare` orchestration with fake testbeds: a mode that fails is reported, the run goes on,
and the exit code says what happened (0 ok, 1 regression, 2 a mode failed). No processes."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from eppkit.observability import expected_spans
from eppkit.observability.client import ClientResult
from eppkit.observability.contract import Epp

from eppkit import compare, modes
from eppkit.compare import report as rp
from eppkit.plan import Endpoint
from eppkit.workload import Load
from tests.support import kit

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"


class FakeJaegerProcess:
    api_url = "http://127.0.0.1:9/jaeger"


class FakeJaegerClient:
    """Answers every trace id with the same real trace."""

    def __init__(self, raw):
        self.raw = raw

    def get_trace_json(self, trace_id):
        return self.raw

    def trace_url(self, trace_id):
        return f"{FakeJaegerProcess.api_url}/api/v3/traces/{trace_id}"


class FakeClient:
    def __init__(self):
        self.n = 0

    def chat(self, body, timeout_s=None):
        self.n += 1
        return ClientResult(trace_id=f"{self.n:032x}", status=200, headers={}, started_s=0.0, finished_s=0.25,
                            body={"choices": [{"message": {"content": "ok"}}], "usage": {"completion_tokens": 4}})

    def flush(self):
        pass

    def close(self):
        pass


class FakeBed:
    """A testbed that serves from FakeClient and whose Jaeger holds one saved trace; or fails to start."""

    def __init__(self, run_dir, topology, trace_file=None, start_error=None):
        setup = modes.check(topology)
        self.mode, self.flow = setup.mode, setup.flow
        self.topology = topology
        self.run_dir = run_dir
        self.start_error = start_error
        self.jaeger = FakeJaegerClient(json.loads((DATA / trace_file).read_text()) if trace_file else None)
        self.backends = [Endpoint("vllm-0", "127.0.0.1", 9)]
        self.stopped = False

    def start(self):
        if self.start_error:
            raise self.start_error
        return self

    def client(self, pool_size=10):
        return FakeClient()

    def expected_spans(self, media_items=0):
        return expected_spans.expected(self.mode, self.flow.spans(self.topology, self.topology.backend.emits,
                                                                  media_items))

    def log_tails(self, lines=60):
        return "=== epp ===\nepp: address already in use"

    def hops(self):
        return []  # Envoy's record of each request: none here (tests/unit/test_hop.py reads real lines)

    def stop(self):
        self.stopped = True


started: dict[str, FakeBed] = {}  # the last bed made per mode


def fake_create(tmp_path, beds):
    def create(topology, runtime="local", jaeger=None):
        bed = FakeBed(tmp_path / f"run-{topology.mode}", topology, **beds[topology.mode])
        started[topology.mode] = bed
        return bed
    return create


def options(**kw):
    defaults = dict(modes=("direct", "ext_proc"), scenarios=("chat",), trace_timeout_s=0.5,
                    load=Load(requests=4, concurrency=2, warmup=1), floors=False)
    return compare.CompareOptions(**{**defaults, **kw})


def test_a_mode_that_fails_to_start_is_reported_and_the_next_mode_still_runs(tmp_path):
    beds = {"ext_proc": {"start_error": RuntimeError("EPP never became ready (port 1234)")},
            "direct": {"trace_file": "stream-direct.json"}}
    out = tmp_path / "report"
    report = compare.run(options(modes=("ext_proc", "direct")), out, jaeger=FakeJaegerProcess(),
                         create=fake_create(tmp_path, beds))
    failed = report["scenarios"]["chat"]["modes"]["ext_proc"]
    assert failed["status"] == "failed"
    assert "EPP never became ready" in failed["error"]
    log = (out / failed["log_file"]).read_text()
    assert "RuntimeError" in log and "address already in use" in log
    direct = report["scenarios"]["chat"]["modes"]["direct"]
    assert direct["status"] == "ok" and direct["requests"]["ok"] == 4
    assert started["direct"].stopped
    assert compare.failed_modes(report) == ["chat/ext_proc"]


def test_a_mode_run_reads_steps_and_completeness_from_the_traces_and_saves_the_representative(tmp_path):
    beds = {"ext_proc": {"trace_file": "chat-ext_proc.json"}, "direct": {"trace_file": "stream-direct.json"}}
    out = tmp_path / "report"
    report = compare.run(options(), out, jaeger=FakeJaegerProcess(), create=fake_create(tmp_path, beds))
    ext = report["scenarios"]["chat"]["modes"]["ext_proc"]
    trace = rp.load_trace(DATA / "chat-ext_proc.json")
    assert ext["completeness"]["ratio"] == 1.0
    assert ext["steps"]["decision"]["p50"] == trace.one(Epp.PICK).duration_ms
    assert ext["overhead_vs_direct"]["gateway"]["p50"] > 0
    rep = ext["representative"]
    assert (out / rep["file"]).is_file() and rep["jaeger_url"].endswith(rep["trace_id"])
    # the direct trace is a streamed one; a request of the chat scenario is judged against the direct table
    assert report["scenarios"]["chat"]["modes"]["direct"]["completeness"]["ratio"] == 1.0


def test_a_trace_missing_spans_makes_the_mode_incomplete_with_names(tmp_path):
    # an ext_proc trace read as sidecar lacks the frontend's spans
    beds = {"sidecar": {"trace_file": "chat-ext_proc.json"}}
    report = compare.run(options(modes=("sidecar",)), tmp_path / "r", jaeger=FakeJaegerProcess(),
                         create=fake_create(tmp_path, beds))
    result = report["scenarios"]["chat"]["modes"]["sidecar"]
    assert result["completeness"]["ratio"] == 0.0
    assert result["completeness"]["missing"] == {"frontend:frontend.route": 4, "frontend:frontend.tokenize": 4}


def test_a_mode_that_serves_no_request_is_failed_with_the_error_kinds(tmp_path, monkeypatch):
    def refuse(self, body, timeout_s=None):
        return ClientResult(trace_id="0" * 32, status=503, headers={}, body={"error": {"message": "no endpoint"}})

    monkeypatch.setattr(FakeClient, "chat", refuse)
    beds = {"direct": {"trace_file": "stream-direct.json"}}
    report = compare.run(options(modes=("direct",)), tmp_path / "r", jaeger=FakeJaegerProcess(),
                         create=fake_create(tmp_path, beds))
    result = report["scenarios"]["chat"]["modes"]["direct"]
    assert result["status"] == "failed"
    assert result["error"].startswith("every request failed (http_503×4); first: {'error'")
    assert (tmp_path / "r" / result["log_file"]).read_text().count("address already in use") == 1


def _args(tmp_path, **kw):
    argv = ["--modes", "direct,ext_proc", "--scenario", "chat", "--requests", "3", "--out", str(tmp_path / "out"),
            "--no-charts", "--no-floors"]
    for k, v in kw.items():
        argv += [f"--{k}", str(v)]
    return kit.parse("compare", *argv)


def _canned(tmp_path, monkeypatch, failed=False):
    beds = {"direct": {"trace_file": "stream-direct.json"}, "ext_proc": {"trace_file": "chat-ext_proc.json"}}
    if failed:
        beds["ext_proc"] = {"start_error": RuntimeError("no")}

    real_run = compare.run

    def run(opts, out_dir, **kw):
        return real_run(opts, out_dir, jaeger=FakeJaegerProcess(), create=fake_create(tmp_path, beds))

    monkeypatch.setattr(compare, "run", run)


def test_exit_code_is_0_when_every_mode_ran(tmp_path, monkeypatch, capsys):
    _canned(tmp_path, monkeypatch)
    assert compare.main(_args(tmp_path)) == compare.EXIT_OK
    out = capsys.readouterr().out
    assert "scenario chat" in out and "ext_proc" in out
    assert (tmp_path / "out" / "report.json").is_file() and (tmp_path / "out" / "summary.md").is_file()


def test_exit_code_is_2_when_a_mode_failed(tmp_path, monkeypatch, capsys):
    _canned(tmp_path, monkeypatch, failed=True)
    assert compare.main(_args(tmp_path)) == compare.EXIT_MODE_FAILED
    assert "mode(s) failed to run: chat/ext_proc" in capsys.readouterr().err


def test_exit_code_is_1_on_a_regression_against_the_baseline(tmp_path, monkeypatch, capsys):
    _canned(tmp_path, monkeypatch)
    assert compare.main(_args(tmp_path)) == 0
    baseline = json.loads((tmp_path / "out" / "report.json").read_text())
    for q in ("p50", "p90"):  # the baseline was much faster before the upstream
        baseline["scenarios"]["chat"]["modes"]["ext_proc"]["steps"]["gateway"][q] = 0.5
    for mode in baseline["scenarios"]["chat"]["modes"].values():  # fake runs' throughput is noise: ungate it
        mode["throughput"]["requests_per_s"] = mode["throughput"]["output_tokens_per_s"] = None
    (tmp_path / "old.json").write_text(json.dumps(baseline))
    assert compare.main(_args(tmp_path, baseline=tmp_path / "old.json")) == compare.EXIT_REGRESSION
    assert "REGRESSIONS against" in capsys.readouterr().out
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["metric"] for r in saved["baseline"]["regressions"]} == {"gateway.p50_ms", "gateway.p90_ms"}


@pytest.mark.parametrize("kw", [{"load": Load(requests=0)}, {"load": Load(concurrency=1000)},
                                {"load": Load(max_duration_s=0)}, {"modes": ("bogus",)}, {"slo": "ttft=fast"},
                                {"load_tool": "locust"}])
def test_options_refuse_unbounded_runs(kw):
    with pytest.raises(ValueError):
        options(**kw).validate()


def test_every_picker_mode_runs_the_same_scorer_and_the_report_says_which(tmp_path):
    seen = {}

    def create(topology, runtime="local", jaeger=None):
        seen[topology.mode] = dict(topology.options)
        return FakeBed(tmp_path / f"run-{topology.mode}", topology, trace_file="chat-ext_proc.json")

    report = compare.run(options(modes=("direct", "ext_proc", "lua-callout"), scorer="prefix-cache-scorer",
                                 scorer_parameters={"hashBlockSize": 16}),
                         tmp_path / "r", jaeger=FakeJaegerProcess(), create=create)
    assert seen == {"direct": {},  # no picker, no scorer option
                    "ext_proc": {"scorer": "prefix-cache-scorer", "scorer_parameters": {"hashBlockSize": 16}},
                    "lua-callout": {"scorer": "prefix-cache-scorer", "scorer_parameters": {"hashBlockSize": 16}}}
    modes = report["scenarios"]["chat"]["modes"]
    assert {m: r["scorer"] for m, r in modes.items()} == {"direct": None, "ext_proc": "prefix-cache-scorer",
                                                         "lua-callout": "prefix-cache-scorer"}
    assert report["config"]["scorer"] == "prefix-cache-scorer"
    assert report["mode_colors"]["ext_proc"] == "#1f77b4"


def test_compare_refuses_an_unknown_scorer_before_starting_anything():
    with pytest.raises(ValueError, match="choose one of"):
        options(scorer="least-queue").validate()


def test_with_no_stream_flag_every_scenario_streams_as_it_says():
    # --stream / --no-stream once shared a dest as two flags, and the first one's default (False) won: the stream
    # scenario was not streamed at all, and TTFT, ITL and TPOT were never measured.
    assert compare.options_from(kit.parse("compare")).stream is None
    assert kit.parse("compare", "--stream").stream is True and kit.parse("compare", "--no-stream").stream is False


def test_the_load_figures_and_objective_reach_the_report(tmp_path, monkeypatch):
    _canned(tmp_path, monkeypatch)
    assert compare.main(_args(tmp_path, slo="e2e=1s")) == compare.EXIT_OK
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["config"]["slo"] == "e2e=1s" and saved["config"]["load_tool"] == "none"
    for result in saved["scenarios"]["chat"]["modes"].values():
        assert result["load_metrics"]["goodput"]["slo"] == {"e2e": 1000.0}
        assert result["load_metrics"]["itl"] is None, "not streamed: no token gaps"
        assert "load_tool" not in result


def recording_floors(tmp_path, monkeypatch):
    """A floor binary that need not be built, and a testbed factory that records (mode, options) of each testbed."""
    from eppkit.compare import floors

    built = SimpleNamespace(build=lambda progress=print: Path("/cache/bin/eppkit-floor-x"))
    monkeypatch.setattr(floors, "FLOORS", built)
    seen = []

    def create(topology, runtime="local", jaeger=None):
        seen.append((topology.mode, dict(topology.options)))
        return FakeBed(tmp_path / f"run-{len(seen)}", topology, trace_file="chat-ext_proc.json")

    return seen, create


def test_each_picker_mode_gets_its_floor_once_per_transport_and_the_report_splits_its_cost(tmp_path, monkeypatch):
    seen, create = recording_floors(tmp_path, monkeypatch)
    report = compare.run(options(modes=("direct", "ext_proc", "sidecar", "external-epp", "lua-callout"), floors=True,
                                 mode_sets={"external-epp": {"epp_command": "myepp --port {grpc_port}"}}),
                         tmp_path / "r", jaeger=FakeJaegerProcess(), create=create)
    floor_runs = [(m, o) for m, o in seen if "floor" in str(o)]
    assert floor_runs == [  # one ext_proc floor for ext_proc and external-epp; the sidecar's and lua-callout's own
        ("external-epp", {"epp_command": "/cache/bin/eppkit-floor-x -transport extproc -port {grpc_port} "
                                         "-pick {endpoints} -decide body"}),
        ("external-epp", {"epp_command": "/cache/bin/eppkit-floor-x -transport extproc -port {grpc_port} "
                                         "-pick {endpoints} -decide body -frontend"}),
        ("lua-callout", {"callout_command": "/cache/bin/eppkit-floor-x -transport callout -port {port} "
                                            "-pick {endpoints}"})]
    block = report["scenarios"]["chat"]["modes"]
    assert list(block) == ["direct", "ext_proc", "floor-ext_proc", "sidecar", "floor-sidecar", "external-epp",
                           "lua-callout", "floor-lua-callout"]
    assert block["sidecar"]["floor"] == "floor-sidecar"
    assert "floor" not in block["direct"]
    assert block["ext_proc"]["floor"] == block["external-epp"]["floor"] == "floor-ext_proc"
    assert block["floor-ext_proc"]["scorer"] == "floor"
    # The same saved trace everywhere: each mode's share over its floor is 0 here, and it is reported.
    assert block["ext_proc"]["over_floor"]["gateway"]["p50"] == 0
    table = compare.rp.format_table(report)
    assert "+0.00 (floor-ext_proc)" in table and "floor-lua-callout" in table


def test_each_body_path_a_mode_takes_runs_beside_its_own_floor(tmp_path, monkeypatch):
    seen, create = recording_floors(tmp_path, monkeypatch)
    report = compare.run(options(modes=("direct", "ext_proc", "gaie-epp"), floors=True,
                                 body_paths=("streamed", "buffered", "none")),
                         tmp_path / "r", jaeger=FakeJaegerProcess(), create=create)
    block = report["scenarios"]["chat"]["modes"]
    # direct has no EPP and GAIE's EPP v1.5.0 takes the body streamed only: each runs once.
    assert list(block) == ["direct", "ext_proc", "floor-ext_proc", "ext_proc+buffered", "floor-ext_proc+buffered",
                           "ext_proc+none", "floor-ext_proc+none", "gaie-epp"]
    assert [o.get("epp_request_body") for m, o in seen if m == "ext_proc"] == [None, "buffered", "none"]
    assert ("external-epp", {"epp_command": "/cache/bin/eppkit-floor-x -transport extproc -port {grpc_port} "
                                            "-pick {endpoints} -decide body -body none",
                            "epp_request_body": "none"}) in seen
    assert block["ext_proc+none"]["floor"] == "floor-ext_proc+none" and block["ext_proc+none"]["body_path"] == "none"
    assert block["direct"]["body_path"] is None and block["gaie-epp"]["floor"] == "floor-ext_proc"


def test_a_concurrency_sweep_runs_each_mode_and_floor_once_per_step_and_tabulates_them(tmp_path, monkeypatch):
    seen, create = recording_floors(tmp_path, monkeypatch)
    loads = []
    monkeypatch.setattr(compare.runner, "Driver", _recording_driver(compare.runner.Driver, loads))
    report = compare.run(options(modes=("direct", "ext_proc"), floors=True, concurrency_sweep=(1, 8)),
                         tmp_path / "r", jaeger=FakeJaegerProcess(), create=create)
    block = report["scenarios"]["chat"]["modes"]
    assert list(block) == ["direct@c1", "direct@c8", "ext_proc@c1", "floor-ext_proc@c1", "ext_proc@c8",
                           "floor-ext_proc@c8"]
    assert loads == [1, 8, 1, 1, 8, 8]  # each step driven at its own concurrency, its floor too
    assert block["ext_proc@c8"]["floor"] == "floor-ext_proc@c8" and block["ext_proc@c8"]["concurrency"] == 8
    assert block["ext_proc@c8"]["overhead_vs_direct"] is not None  # against direct at the same step
    assert report["scenarios"]["chat"]["workload"]["concurrency_sweep"] == [1, 8]
    table = next(t for t in rp.extra_tables(report, report["scenarios"]["chat"]) if "concurrency" in t.title)
    assert table.columns == ("in flight", "direct", "ext_proc", "floor-ext_proc")
    assert [row[0] for row in table.rows] == ["1", "8"]
    compare.output.write(report, tmp_path / "r")
    assert (tmp_path / "r" / "concurrency-chat.png").is_file()
    assert "Per concurrency" in (tmp_path / "r" / "summary.md").read_text()


def _recording_driver(real, loads):
    class Recording(real):
        def __init__(self, client, load, **kw):
            loads.append(load.concurrency)
            super().__init__(client, load, **kw)
    return Recording


def test_a_concurrency_sweep_is_checked_before_anything_runs():
    from eppkit.compare import sweep
    from eppkit.workload import concurrency_steps

    assert concurrency_steps("16,1,4,4") == (1, 4, 16)
    assert sweep.split("floor-ext_proc+buffered@c16") == ("floor-ext_proc+buffered", 16)
    assert sweep.split("ext_proc") == ("ext_proc", None)
    for bad in ("0,4", "a,b", "1,2,3,4,5,6,7,8,9"):
        with pytest.raises(ValueError, match="--concurrency-sweep"):
            concurrency_steps(bad)
    with pytest.raises(ValueError, match="--concurrency-sweep"):
        options(concurrency_sweep=(1, 1000)).validate()
