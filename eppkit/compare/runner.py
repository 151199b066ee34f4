"""The comparison's run: every scenario through every mode, each mode on a testbed of its own sharing one Jaeger
(and, for a real vLLM, one set of servers); a mode that fails is reported and the run goes on."""

from __future__ import annotations

import functools
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from eppkit import modes, runtimes
from eppkit.builds import inference_perf
from eppkit.compare import admission, bands, bodypaths, cachehits, floors, loadtool, promptsizes, sweep
from eppkit.compare import loadmetrics as lm
from eppkit.compare import report as rp
from eppkit.compare.options import CompareOptions, at, mode_options, runs, topology_for
from eppkit.compare.traces import collect_traces
from eppkit.components.jaeger import Jaeger
from eppkit.core.paths import reports_dir
from eppkit.core.progress import ProgressLine, QuietLine
from eppkit.observability import steps as st
from eppkit.runtimes import create as create_testbed
from eppkit.runtimes import create_jaeger
from eppkit.runtimes.testbed import new_run_dir
from eppkit.runtimes.vllm_servers import ServerPool
from eppkit.topology import Topology, VllmSpec
from eppkit.workload import SCENARIOS, Driver, Scenario, WorkloadResult, plan_requests


def run_mode(options: CompareOptions, scenario: Scenario, mode: str, jaeger: Jaeger, out_dir: Path,
             progress: ProgressLine, label: str, create: Callable = create_testbed,
             load_tool: tuple[inference_perf.LoadTool | None, str] | None = None,
             topology: Topology | None = None) -> dict:
    """Run one mode through one scenario; always returns a result (``status`` ok or failed).

    ``load_tool``: (the installed tool or None, why not) when ``--load-tool`` asks for a cross-check.
    ``topology``: another testbed under the mode's name (a floor: eppkit.compare.floors)."""
    t_mode = time.monotonic()
    measured = plan_requests(scenario, options.load.requests, options.seed, stream=options.stream)
    warm = plan_requests(scenario, options.load.warmup, options.seed + 1_000_003, stream=options.stream)
    result: dict = {"status": "failed", "error": None,
                    "scorer": mode_options(options, bodypaths.split(sweep.split(mode)[0])[0]).get("scorer")}
    progress.update(f"{label} {mode:<15} starting testbed ...")
    bed = None
    try:
        bed = create(topology or topology_for(options, mode, scenario), runtime=options.runtime, jaeger=jaeger)
        result["run_dir"] = str(bed.run_dir)
        bed.start()
        if scenario.bands:  # the EPP reads them as it watches: before the warm-up and the load's first scrape
            told = bands.tell(bed, scenario)
            result["admission"] = admission.split(sweep.split(mode)[0])[1] if told else None
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _failed(result, exc, bed, out_dir, scenario.name, mode, progress, label, "failed to start")

    client = None
    try:
        model = bed.backends[0].model  # servers given by URL may serve another model than the mock's
        measured, warm = with_model(measured, model), with_model(warm, model)
        client = bed.client(pool_size=max(10, options.load.concurrency))
        t_start = time.monotonic()
        result["load_average"] = round(os.getloadavg()[0], 2)  # how busy the machine was: client times move with it
        progress.update(f"{label} {mode:<15} warming up ({len(warm)} requests) ...")
        for req in warm:
            client.chat(req.body, timeout_s=options.load.request_timeout_s)

        def on_progress(done, total, errors, elapsed):
            progress.update(f"{label} {mode:<15} {done}/{total} requests, {errors} errors, {elapsed:.1f} s")

        driver = Driver(client, options.load, on_progress=on_progress)
        work: WorkloadResult = driver.run(measured)
        client.flush()
        media = {r.index: r.media_items for r in measured}
        sizes = {r.index: r.prompt_kb for r in measured if r.prompt_kb}
        band_of = {r.index: r.band for r in measured if r.band}
        samples = [{**s.to_json(), "ok": s.ok, **({"prompt_kb": sizes[s.index]} if s.index in sizes else {}),
                    **({"band": band_of[s.index]} if s.index in band_of else {})} for s in work.samples]

        def rules(sample):
            return bed.expected_spans(media_items=media.get(sample["index"], 0))

        def on_poll(have, want):
            progress.update(f"{label} {mode:<15} reading traces {have}/{want} ...")

        raws = collect_traces(bed.jaeger, samples, rules, timeout_s=options.trace_timeout_s, on_poll=on_poll)
        hops = {h.trace_id: h for h in bed.hops()}  # Envoy's record of each request: the EPP hop, phase by phase
        for s in samples:
            if s["trace_id"] in hops:
                s["hop"] = hops[s["trace_id"]].phases()
                if not s["ok"]:  # who answered it, in Envoy's words (the EPP's own reply: epp_<its code>)
                    s["envoy_details"] = bands.who_answered(hops[s["trace_id"]])
            trace = raws[s["trace_id"]][1] if s["trace_id"] in raws else None
            s["steps"] = {k: round(v, 3) for k, v in st.step_durations(trace, bed.mode).items()} if trace else {}
            prefix = cachehits.of_trace(trace) if trace else None
            if prefix is not None:
                s["prefix"] = prefix
        result.update(rp.summarize_mode(samples, planned=len(measured), wall_s=work.wall_s, stopped=work.stopped))
        result["load_metrics"] = lm.summarize(samples, wall_s=work.wall_s, slo=lm.Slo.parse(options.slo))
        if sizes:
            result["by_prompt_kb"] = promptsizes.curve(samples)
        if scenario.bands:
            result["by_band"] = bands.summarize(samples, scenario.bands)
        result["prefix_cache"] = cachehits.summarize(samples)
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
            path = rp.save_trace(raws[rep["trace_id"]][0], out_dir / "traces" / f"{scenario.name}-{mode}-{rep['trace_id']}.json")
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
        progress: ProgressLine | None = None, create: Callable = create_testbed, cluster=None) -> dict:
    """Run every scenario through every mode; returns the report (not yet written). ``cluster``: the cluster
    runtime's, where the user named one (:mod:`eppkit.cluster.handle`): every testbed and the Jaeger on it."""
    options.validate()
    if cluster is not None:
        create = functools.partial(create, cluster=cluster)
    options.backend.require_installed()  # BackendMissing, saying how to get it, before anything starts
    if options.floors and not runtimes.get(options.runtime, cluster).reaches_this_host():
        # A floor is a program of this host (eppkit/floors), which the Pods of a cluster of your own whose node is
        # another machine cannot reach.
        print("compare: the floors are not run on this cluster of your own (each is a program of this host, which "
              "its Pods cannot reach: their node is another machine): as --no-floors", file=sys.stderr)
        options = replace(options, floors=False)
    progress = progress or QuietLine()
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
        own = jaeger = create_jaeger(options.runtime, new_run_dir("jaeger-compare"), cluster=cluster).start()
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
        total = sum(len(runs(options, SCENARIOS[name])) for name in options.scenarios)
        n = 0
        load = options.load
        for name in options.scenarios:
            scenario = SCENARIOS[name]
            block = {
                "description": scenario.description, "flow": scenario.flow,
                "workload": {"requests": load.requests, "concurrency": at(options, None, scenario).load.concurrency,
                             "rate": load.rate, "warmup": load.warmup, "seed": options.seed,
                             "concurrency_sweep": list(options.concurrency_sweep),
                             "stream": scenario.stream if options.stream is None else options.stream},
                "modes": {},
            }
            report["scenarios"][name] = block
            for key, mode, path, setting, concurrency in runs(options, scenario):
                n += 1
                label = f"[{n}/{total} {name}]"
                step = at(options, concurrency, scenario)  # a sweep's step, or what the scenario keeps in flight
                block["modes"][key] = run_mode(step, scenario, key, jaeger, out_dir, progress, label, create,
                                               load_tool=tool,
                                               topology=topology_for(options, mode, scenario, path, setting))
                block["modes"][key]["body_path"] = path if bodypaths.applies(mode) else None
                if concurrency is not None:
                    block["modes"][key]["concurrency"] = concurrency
                floor = floors.floor_of(mode) if options.floors else None
                if floor is not None:
                    floor = sweep.key(bodypaths.key(floor, path), concurrency)
                    block["modes"][key]["floor"] = floor
                    if floor not in block["modes"]:  # one floor per transport, path, step and scenario, after its first mode
                        block["modes"][floor] = run_floor(step, scenario, floor, jaeger, out_dir, progress, label,
                                                          create)
                        if concurrency is not None:
                            block["modes"][floor]["concurrency"] = concurrency
            rp.add_overheads(block["modes"])
    finally:
        if servers is not None:
            servers.stop()
        if own is not None:
            own.stop()
    report["wall_s"] = round(time.monotonic() - t0, 1)
    return report


def run_floor(options: CompareOptions, scenario: Scenario, key: str, jaeger: Jaeger, out_dir: Path,
              progress: ProgressLine, label: str, create: Callable) -> dict:
    """A floor (eppkit.compare.floors): the same scenario and load through the same wiring, its picker a Go server
    that costs nothing."""
    try:
        mode, mode_set = floors.floor_topology(key, progress.message)
    except Exception as exc:  # no Go: the floor is reported failed, with what to do, and the run goes on
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "scorer": "floor"}
    topology = replace(topology_for(options, mode, scenario), options=mode_set)
    result = run_mode(options, scenario, key, jaeger, out_dir, progress, label, create, topology=topology)
    result["scorer"] = "floor"
    return result


def failed_modes(report: dict) -> list[str]:
    return [f"{s}/{m}" for s, b in report.get("scenarios", {}).items()
            for m, r in b.get("modes", {}).items() if r.get("status") != "ok"]
