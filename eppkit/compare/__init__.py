"""`eppkit compare`: the same seeded workload through each integration mode, costs read from the traces.

For each scenario, for each mode in turn: start a testbed (sharing one Jaeger), send a few
warm-up requests (not counted), drive the workload (eppkit.workload), read every request's
trace back, turn it into step durations (eppkit.observability.steps) and a completeness verdict
(eppkit.observability.expected_spans), keep the representative trace, work out what load tools report
(ITL, TPOT, goodput: eppkit.compare.loadmetrics), with ``--load-tool`` send the same requests once more
with inference-perf and set its figures beside the kit's (eppkit.compare.loadtool), stop the testbed.
Then the report (eppkit.compare.report): report.json, summary.md, charts.

A mode that fails to start (or to serve a single request) is reported as failed, with its
error and log tails, and the run goes on with the next mode. Exit codes: 0 ok, 1 a
regression against ``--baseline``, 2 a mode failed to run.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import requests

from eppkit import flows, modes
from eppkit import options as opt
from eppkit.backends import Backend
from eppkit.builds import inference_perf
from eppkit.compare import loadmetrics as lm
from eppkit.compare import loadtool, output
from eppkit.compare import report as rp
from eppkit.components.jaeger import Jaeger
from eppkit.core.paths import reports_dir
from eppkit.core.polling import PollTimeout, poll
from eppkit.modes import external_epp
from eppkit.modes.options import read_options
from eppkit.observability import expected_spans
from eppkit.observability import steps as st
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.observability.trace_model import from_jaeger_json
from eppkit.runtimes import create as create_testbed
from eppkit.runtimes import create_jaeger
from eppkit.runtimes.vllm_servers import ServerPool
from eppkit.runtimes.testbed import new_run_dir
from eppkit.services.picker.settings import PickerSettings
from eppkit.services.vllm.config import MockLatency, latency_from_args
from eppkit.topology import Topology, VllmSpec
from eppkit.workload import SCENARIOS, Driver, Scenario, WorkloadResult, plan_requests

EXIT_OK, EXIT_REGRESSION, EXIT_MODE_FAILED = 0, 1, 2
# Upper bounds that keep one run bounded whatever the flags say.
MAX_REQUESTS, MAX_CONCURRENCY, MAX_DURATION_S = 10_000, 256, 3600.0


def _default(name: str):
    """The option's one default (the options table's, command compare)."""
    return opt.default(name, opt.COMPARE)


@dataclass
class CompareOptions:
    """What one comparison runs; the defaults are the `eppkit compare` flags' (eppkit.options)."""

    modes: tuple[str, ...] = field(default_factory=lambda: _default("modes"))
    scenarios: tuple[str, ...] = _default("scenarios")
    requests: int = _default("requests")  # measured requests per mode and scenario
    concurrency: int = _default("concurrency")
    rate: float = _default("rate")  # requests per second; 0: as fast as the concurrency allows
    max_duration_s: float = _default("max_duration_s")  # per mode and scenario: no new request after this
    warmup: int = _default("warmup")  # sent first, one at a time, not counted
    seed: int = _default("seed")
    runtime: str = _default("runtime")
    backends: int = _default("backends")  # aggregated: vLLMs; pd / epd: decoders (one prefill, two encoders)
    latency: MockLatency = field(default_factory=MockLatency)  # every mock vLLM's knobs
    # What serves inference (eppkit.backends): the kit's mock, llm-d-inference-sim, or your servers.
    backend: Backend = field(default_factory=Backend)
    encode_latency: float = _default("encode_latency")
    # The same scorer in every picker mode, so differences between modes are the integrations'.
    scorer: str = _default("scorer")
    scorer_parameters: dict = field(default_factory=dict)
    stream: bool | None = None  # None: as the scenario says
    request_timeout_s: float = _default("request_timeout_s")
    trace_timeout_s: float = 20.0  # per mode: how long to wait for traces to be complete
    # More options of one mode (e.g. external-epp's epp_command from --epp-command), by mode name.
    mode_sets: dict = field(default_factory=dict)
    charts: bool = True
    # Bring your own plugin: the user's filters in every mode's chain, and the Envoy version (None: installed one).
    filters: tuple = ()
    envoy_version: str | None = None
    # What load tools report: goodput against this objective (eppkit.compare.loadmetrics), and a load tool
    # that sends each mode's requests once more, its figures set beside the kit's (eppkit.compare.loadtool).
    slo: str = _default("slo")
    load_tool: str = _default("load_tool")

    def validate(self) -> "CompareOptions":
        bad = [m for m in self.modes if m not in modes.names()]
        if bad:
            raise ValueError(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(modes.names())}")
        PickerSettings(scorer=self.scorer, scorer_parameters=self.scorer_parameters).validate()
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad:
            raise ValueError(f"unknown scenario(s) {', '.join(bad)}; choose from {', '.join(SCENARIOS)}")
        if not self.modes or not self.scenarios:
            raise ValueError("need at least one mode and one scenario")
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise ValueError(f"--requests must be 1..{MAX_REQUESTS}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"--concurrency must be 1..{MAX_CONCURRENCY}")
        if not 0 < self.max_duration_s <= MAX_DURATION_S:
            raise ValueError(f"--max-duration must be in (0, {MAX_DURATION_S:g}] seconds")
        if self.rate < 0 or self.warmup < 0 or self.backends < 1:
            raise ValueError("--rate and --warmup cannot be negative; --backends must be at least 1")
        for name in self.scenarios:
            self.backend.validate(flows.get(SCENARIOS[name].flow))
        lm.Slo.parse(self.slo)
        if self.load_tool not in ("none", inference_perf.NAME):
            raise ValueError(f"--load-tool {self.load_tool}: choose none or {inference_perf.NAME}")
        return self


def mode_options(options: CompareOptions, mode: str) -> dict:
    """The options every mode runs with: the scorer, in each mode that has a picker."""
    scoring = {"scorer": options.scorer, "scorer_parameters": options.scorer_parameters}
    extra = dict(options.mode_sets.get(mode, {}))
    try:
        read_options(modes.get(mode).options, scoring, mode)
    except ValueError:  # a mode without a kit picker (direct, an EPP of your own)
        return extra
    return {**scoring, **extra}


def topology_for(options: CompareOptions, mode: str, scenario: Scenario) -> Topology:
    return Topology(
        mode=mode, flow=scenario.flow,
        vllm=[VllmSpec(name=f"vllm-{i}") for i in range(options.backends)],
        prefill=1, decode=options.backends, encoders=2,
        latency=options.latency, encode_latency=options.encode_latency, seed=options.seed,
        options=mode_options(options, mode), backend=options.backend,
        filters=list(options.filters), envoy_version=options.envoy_version,
    )


# -- progress ------------------------------------------------------------------------------------------

class ProgressLine:
    """One updating line per mode on a terminal; elsewhere (CI logs) a line every few seconds.

    Hand-written rather than tqdm: one line with our own fields, no extra dependency.
    """

    def __init__(self, stream=None, every_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every_s = every_s
        self._last_len = 0
        self._last_print = 0.0
        self._lock = threading.Lock()  # workers report progress from their own threads

    def update(self, text: str) -> None:
        with self._lock:
            self._update(text)

    def _update(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self._last_len))
            self._last_len = len(text)
            self.stream.flush()
        elif time.monotonic() - self._last_print >= self.every_s:
            self._last_print = time.monotonic()
            print(text, file=self.stream, flush=True)

    def done(self, text: str) -> None:
        with self._lock:
            self._done(text)

    def _done(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self._last_len) + "\n")
            self._last_len = 0
        else:
            print(text, file=self.stream)
        self._last_print = 0.0
        self.stream.flush()

    def message(self, text: str) -> None:
        if self.tty and self._last_len:
            self.stream.write("\n")
            self._last_len = 0
        print(text, file=self.stream, flush=True)


class _Quiet(ProgressLine):
    def __init__(self):
        super().__init__(stream=io.StringIO())


# -- one mode -----------------------------------------------------------------------------------------

def collect_traces(jaeger: JaegerClient, samples: list[dict], rules: Callable[[dict], tuple],
                   *, timeout_s: float, settle_s: float = 0.6, on_poll: Callable[[int, int], None] | None = None
                   ) -> dict[str, dict]:
    """Fetch each successful sample's trace until it holds every expected span or ``timeout_s`` passes.

    Sets ``complete``/``missing`` on every successful sample; returns raw Jaeger JSON by trace id.
    ``settle_s``: first wait for Envoy's span flush (every 200 ms) and the client's exporter.
    """
    wanted = {s["trace_id"]: s for s in samples if s.get("ok") and s.get("trace_id")}
    raws: dict[str, dict] = {}
    pending = dict(wanted)

    def read_pending() -> int:
        """One pass over the traces not yet complete; how many are still pending."""
        for trace_id, sample in list(pending.items()):
            try:
                raw = jaeger.get_trace_json(trace_id)
            except requests.RequestException:
                raw = None
            if raw is None:
                continue
            raws[trace_id] = raw
            sample["missing"] = expected_spans.missing(from_jaeger_json(raw), rules(sample))
            if not sample["missing"]:
                del pending[trace_id]
        if on_poll:
            on_poll(len(wanted) - len(pending), len(wanted))
        return len(pending)

    time.sleep(settle_s)
    try:
        poll(read_pending, until=lambda left: left == 0, timeout_s=timeout_s, interval_s=0.3,
             describe="every trace complete")
    except PollTimeout:
        pass  # the incomplete ones are reported as such, with what they miss
    for trace_id, sample in wanted.items():
        if trace_id not in raws:
            sample["missing"] = ["the whole trace (Jaeger has no span of it)"]
        sample["complete"] = not sample["missing"]
    return raws


def run_mode(options: CompareOptions, scenario: Scenario, mode: str, jaeger: Jaeger, out_dir: Path,
             progress: ProgressLine, label: str, create: Callable = create_testbed,
             load_tool: tuple[inference_perf.LoadTool | None, str] | None = None) -> dict:
    """Run one mode through one scenario; always returns a result (``status`` ok or failed).

    ``load_tool``: (the installed tool or None, why not) when ``--load-tool`` asks for a cross-check."""
    t_mode = time.monotonic()
    measured = plan_requests(scenario, options.requests, options.seed, stream=options.stream)
    warm = plan_requests(scenario, options.warmup, options.seed + 1_000_003, stream=options.stream)
    result: dict = {"status": "failed", "error": None, "scorer": mode_options(options, mode).get("scorer")}
    progress.update(f"{label} {mode:<15} starting testbed ...")
    bed = None
    try:
        bed = create(topology_for(options, mode, scenario), runtime=options.runtime, jaeger=jaeger)
        result["run_dir"] = str(bed.run_dir)
        bed.start()
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _failed(result, exc, bed, out_dir, scenario.name, mode, progress, label, "failed to start")

    client = None
    try:
        model = bed.backends[0].model  # servers given by URL may serve another model than the mock's
        measured, warm = with_model(measured, model), with_model(warm, model)
        client = bed.client(pool_size=max(10, options.concurrency))
        t_start = time.monotonic()
        result["load_average"] = round(os.getloadavg()[0], 2)  # how busy the machine was: client times move with it
        progress.update(f"{label} {mode:<15} warming up ({len(warm)} requests) ...")
        for req in warm:
            client.chat(req.body, timeout_s=options.request_timeout_s)

        def on_progress(done, total, errors, elapsed):
            progress.update(f"{label} {mode:<15} {done}/{total} requests, {errors} errors, {elapsed:.1f} s")

        driver = Driver(client, concurrency=options.concurrency, rate=options.rate,
                        max_duration_s=options.max_duration_s, request_timeout_s=options.request_timeout_s,
                        on_progress=on_progress)
        work: WorkloadResult = driver.run(measured)
        client.flush()
        media = {r.index: r.media_items for r in measured}
        samples = [{**s.to_json(), "ok": s.ok} for s in work.samples]

        def rules(sample):
            return bed.expected_spans(media_items=media.get(sample["index"], 0))

        def on_poll(have, want):
            progress.update(f"{label} {mode:<15} reading traces {have}/{want} ...")

        raws = collect_traces(bed.jaeger, samples, rules, timeout_s=options.trace_timeout_s, on_poll=on_poll)
        hops = {h.trace_id: h for h in bed.hops()}  # Envoy's record of each request: the EPP hop, phase by phase
        for s in samples:
            if s["trace_id"] in hops:
                s["hop"] = hops[s["trace_id"]].phases()
            raw = raws.get(s["trace_id"])
            s["steps"] = {k: round(v, 3) for k, v in st.step_durations(from_jaeger_json(raw), bed.mode).items()} if raw else {}
        result.update(rp.summarize_mode(samples, planned=len(measured), wall_s=work.wall_s, stopped=work.stopped))
        result["load_metrics"] = lm.summarize(samples, wall_s=work.wall_s, slo=lm.Slo.parse(options.slo))
        result["samples"] = samples
        result["startup_s"] = round(t_start - t_mode, 3)
        if result["requests"]["ok"] == 0:
            kinds = ", ".join(f"{k}×{v}" for k, v in result["errors"].items())
            first = next((s["detail"] for s in samples if s.get("detail")), "")
            result["error"] = f"every request failed ({kinds}); first: {first}"
            result["log_file"] = _save_logs(bed, out_dir, scenario.name, mode, result["error"])
            progress.done(f"{label} {mode:<15} FAILED: {result['error'][:160]}")
            return result
        result["status"] = "ok"
        rep = rp.representative(samples)
        if rep is not None:
            path = rp.save_trace(raws[rep["trace_id"]], out_dir / "traces" / f"{scenario.name}-{mode}-{rep['trace_id']}.json")
            result["representative"] = {"trace_id": rep["trace_id"], "index": rep["index"], "e2e_ms": rep["steps"]["e2e"],
                                        "file": str(path.relative_to(out_dir)),
                                        "jaeger_url": bed.jaeger.trace_url(rep["trace_id"])}
        if load_tool is not None:
            progress.update(f"{label} {mode:<15} {inference_perf.NAME}: the same {len(measured)} requests ...")
            result["load_tool"] = loadtool.cross_check(
                load_tool[0], reason=load_tool[1], bed=bed, kit=result, planned=measured, model=model, options=options,
                folder=out_dir / "load-tool" / f"{scenario.name}-{mode}", configured_itl_ms=configured_itl(options))
        e2e = result["steps"].get("e2e", {})
        progress.done(f"{label} {mode:<15} {result['requests']['ok']}/{result['requests']['sent']} ok, "
                      f"{result['requests']['failed']} errors, e2e p50 {e2e.get('p50', 0):.1f} ms, "
                      f"complete {rp.pct(result['completeness']['ratio'])}, {time.monotonic() - t_mode:.1f} s")
        return result
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _failed(result, exc, bed, out_dir, scenario.name, mode, progress, label, "failed while running")
    finally:
        if client is not None:
            client.close()
        bed.stop()


def configured_itl(options: CompareOptions) -> float | None:
    """The inter-token latency every token gap should show: the mock's, when it does not change under load."""
    if options.backend.external or options.latency.time_factor_under_load > 1.0:
        return None
    return options.latency.inter_token_latency


def with_model(planned: list, model: str) -> list:
    """The planned requests with ``model`` in their bodies (the workload names the mock's)."""
    return [replace(r, body={**r.body, "model": model}) if r.body.get("model") != model else r for r in planned]


def _failed(result: dict, exc: BaseException, bed, out_dir: Path, scenario: str, mode: str,
            progress: ProgressLine, label: str, what: str) -> dict:
    text = f"{type(exc).__name__}: {exc}"
    result.update(status="failed", error=text)
    result["log_file"] = _save_logs(bed, out_dir, scenario, mode, f"{mode} {what}: {text}\n\n{traceback.format_exc()}")
    progress.done(f"{label} {mode:<15} FAILED ({what}): {text.splitlines()[0][:160]}  (logs: {out_dir / result['log_file']})")
    return result


def _save_logs(bed, out_dir: Path, scenario: str, mode: str, header: str) -> str:
    """``header`` and every component's log tail into logs/<scenario>-<mode>.log; its path in the report folder."""
    log = out_dir / "logs" / f"{scenario}-{mode}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    tails = ""
    if bed is not None:
        try:
            tails = bed.log_tails(80)
        except Exception:  # the testbed may not have got far enough to have logs
            tails = ""
    log.write_text(f"{header}\n{tails}\n")
    return str(log.relative_to(out_dir))


# -- the whole run -------------------------------------------------------------------------------------

def default_out_dir() -> Path:
    return reports_dir() / time.strftime("compare-%Y%m%d-%H%M%S")


def run(options: CompareOptions, out_dir: Path, *, jaeger: Jaeger | None = None,
        progress: ProgressLine | None = None, create: Callable = create_testbed) -> dict:
    """Run every scenario through every mode; returns the report (not yet written)."""
    options.validate()
    options.backend.require_installed()  # BackendMissing, saying how to get it, before anything starts
    progress = progress or _Quiet()
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    report: dict = {
        "schema": rp.SCHEMA,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "config": {**asdict(options), "modes": list(options.modes), "scenarios": list(options.scenarios)},
        # Who served: an external backend's own steps (queue, prefill, decode) are not in its traces.
        "backend": {"label": options.backend.label, "external": options.backend.external,
                    "spans": options.backend.emits},
        "steps": [asdict(s) for s in st.STEPS],
        "mode_colors": {m: modes.get(m).color for m in options.modes},
        "scenarios": {},
    }
    own = servers = None
    if jaeger is None:
        progress.update(f"starting Jaeger ({options.runtime}) ...")
        own = jaeger = create_jaeger(options.runtime, new_run_dir("jaeger-compare")).start()
    report["jaeger_api_url"] = jaeger.api_url
    tool = None
    if options.load_tool != "none":
        found = inference_perf.find()
        tool = (found, "" if found else inference_perf.missing())
        if found is None:
            progress.message(f"eppkit compare: the {options.load_tool} cross-check is skipped: {tool[1]}")
    try:
        if options.backend.entry.shared and not options.backend.running:
            # A real vLLM starts in 30-90 s: the servers start once and every mode's testbed shares them.
            progress.update(f"starting {options.backends} vLLM server(s) once for every mode (30-90 s) ...")
            servers = ServerPool(jaeger.otlp_grpc_endpoint)
            pods = Topology(vllm=[VllmSpec(name=f"vllm-{i}") for i in range(options.backends)], seed=options.seed,
                            backend=options.backend)
            options = replace(options, backend=servers.backend_for(pods))
        total = len(options.scenarios) * len(options.modes)
        n = 0
        for name in options.scenarios:
            scenario = SCENARIOS[name]
            block = {
                "description": scenario.description, "flow": scenario.flow,
                "workload": {"requests": options.requests, "concurrency": options.concurrency, "rate": options.rate,
                             "warmup": options.warmup, "seed": options.seed,
                             "stream": scenario.stream if options.stream is None else options.stream},
                "modes": {},
            }
            report["scenarios"][name] = block
            for mode in options.modes:
                n += 1
                label = f"[{n}/{total} {name}]"
                block["modes"][mode] = run_mode(options, scenario, mode, jaeger, out_dir, progress, label, create,
                                                load_tool=tool)
            rp.add_overheads(block["modes"])
    finally:
        if servers is not None:
            servers.stop()
        if own is not None:
            own.stop()
    report["wall_s"] = round(time.monotonic() - t0, 1)
    return report


def failed_modes(report: dict) -> list[str]:
    return [f"{s}/{m}" for s, b in report.get("scenarios", {}).items()
            for m, r in b.get("modes", {}).items() if r.get("status") != "ok"]


# -- command line ---------------------------------------------------------------------------------------

def options_from(args: argparse.Namespace) -> CompareOptions:
    """The compare options the command line gives (its flags: eppkit.options, command compare)."""
    return CompareOptions(
        modes=args.modes, scenarios=args.scenarios, requests=args.requests, concurrency=args.concurrency,
        rate=args.rate, max_duration_s=args.max_duration_s, warmup=args.warmup, seed=args.seed,
        runtime=args.runtime, backends=args.backends, latency=latency_from_args(args), encode_latency=args.encode_latency,
        backend=opt.backend(args), scorer=args.scorer, scorer_parameters=args.scorer_parameters,
        stream=args.stream, request_timeout_s=args.request_timeout_s, charts=args.charts,
        mode_sets={external_epp.MODE.name: opt.epp_options(args)},
        filters=tuple(args.filters or ()), envoy_version=args.envoy_version, slo=args.slo, load_tool=args.load_tool,
    )


def main(args: argparse.Namespace) -> int:
    options = options_from(args)
    try:
        options.validate()
        baseline = rp.load(args.baseline) if args.baseline else None
    except (ValueError, OSError) as exc:
        print(f"eppkit compare: {exc}", file=sys.stderr)
        return EXIT_MODE_FAILED
    out_dir = args.out or default_out_dir()
    progress = ProgressLine()
    progress.message(f"eppkit compare: {len(options.modes)} mode(s) x {len(options.scenarios)} scenario(s), "
                     f"{options.requests} requests each, concurrency {options.concurrency}, backend: "
                     f"{options.backend.label}; report in {out_dir}")
    try:
        report = run(options, out_dir, progress=progress)
    except (OSError, RuntimeError) as exc:  # modes report their own failures; this is Jaeger or the disk
        progress.message(f"eppkit compare: cannot run: {type(exc).__name__}: {exc}")
        return EXIT_MODE_FAILED
    if baseline is not None:
        report["baseline"] = {"file": str(args.baseline), "threshold": args.threshold, "floor_ms": args.threshold_ms,
                              "regressions": rp.compare_to_baseline(report, baseline, threshold=args.threshold,
                                                                    floor_ms=args.threshold_ms)}
    paths = output.write(report, out_dir, charts=options.charts)
    print()
    print(rp.format_table(report))
    print(f"report: {paths['markdown']}\npage: {paths['html']}\nnumbers: {paths['json']}\nwall time {report['wall_s']:.0f} s")
    failed = failed_modes(report)
    if failed:
        print(f"mode(s) failed to run: {', '.join(failed)} (see {paths['markdown']})", file=sys.stderr)
        return EXIT_MODE_FAILED
    if baseline is not None and report["baseline"]["regressions"]:
        return EXIT_REGRESSION
    return EXIT_OK
