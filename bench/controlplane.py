"""The Kubernetes control plane and the EPPs that watch it: start-up, decisions and convergence against pool size.

``python -m bench.controlplane [--sizes 1,100,1000] [--starts 5] [--picks 300] [--flips 5]`` measures, on the
kit's own parts and nothing else (no Envoy, no Jaeger: each EPP is asked directly over ext_proc):

1. **start per session**: the control plane from nothing to ready (certificates, etcd from the snapshot,
   kube-apiserver's /readyz, custom types read), then a namespace, an InferencePool and 2 Ready pods,
   then GAIE's EPP from exec to gRPC health SERVING; ``--starts`` times. The same with the kit's EPP.
2. **per pool size** (``--sizes``; the pods' mocks are the kit's, ``PER_MOCK`` addresses per process):
   - the pool's creation (the pool, then each Pod and its status: 2 requests per pod, 16 at a time);
   - each EPP's **decision latency**: ``--picks`` ext_proc streams one after another (request headers and
     a JSON body; the time until the pick comes back, this client's own cost included) with GAIE's
     built-in plugins and with the kit's EPP (queue-scorer);
   - each EPP's memory (RSS) and CPU after a settle period (its metrics scrapes of every pod);
   - **convergence after a change**: a pod turned not Ready, then Ready again, ``--flips`` times, while
     the EPP is asked for that very pod (GAIE's test header ``test-epp-endpoint-selection``; GAIE's EPP
     with its conformance config, which honours it): the time from the status write being sent to the
     first pick of the steady state after it (no longer that pod / that pod again).

Writes ``bench/results/controlplane-<time>.json`` and ``.md`` (the machine and its load average next to
every table) and prints the Markdown. Bounded: every wait has a deadline; ``--quick``: sizes 1,100, fewer
repetitions (~2 min). The cold build time is not measured here (it would rebuild kube-apiserver from an empty
Go cache): ``--cold-build`` does that in a throwaway GOCACHE/GOMODCACHE (network needed, 3-12 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.system import CpuMeter, loadavg, machine, memory_kib
from eppkit.builds import controlplane as cp_build
from eppkit.builds import gaie as gaie_build
from eppkit.components.controlplane import ControlPlane
from eppkit.components.inference_pool import InferencePoolObjects, pod_address
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess, service_argv
from eppkit.components.readiness import GrpcHealthReady, HttpReady
from eppkit.modes import gaie_epp
from eppkit.plan import PoolTarget

RESULTS = Path(__file__).resolve().parent / "results"
PER_MOCK = 250  # pod addresses per mock process
SETTLE_S = 5.0
EPPS = ("gaie-epp", "kit-epp")
TEST_HEADER = "test-epp-endpoint-selection"
DESTINATION = "x-gateway-destination-endpoint"


def refresh_s(pods: int) -> float:
    """How often each EPP scrapes every pod: 200 ms on small pools, 1 s from 100 pods (5,000 scrapes/s of a
    1,000-pod pool at 200 ms cost GAIE's EPP half a core here, and the kit's Python EPP more)."""
    return 0.2 if pods < 100 else 1.0


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] if values else float("nan")


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(pct(values, 50), 3), "p90": round(pct(values, 90), 3),
            "p99": round(pct(values, 99), 3), "min": round(min(values), 3) if values else None,
            "max": round(max(values), 3) if values else None}


# -- asking an EPP directly ----------------------------------------------------------------------------

class Picker:
    """ext_proc streams to one EPP: request headers, then a JSON body; the endpoint it picks, or its refusal."""

    def __init__(self, port: int) -> None:
        import grpc
        from envoy.config.core.v3 import base_pb2
        from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
        from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as epg

        self._ep, self._base = ep, base_pb2
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._stub = epg.ExternalProcessorStub(self._channel)
        self._n = 0

    def close(self) -> None:
        self._channel.close()

    def pick(self, force: str | None = None, timeout_s: float = 5.0) -> str:
        ep, base = self._ep, self._base
        self._n += 1
        body = json.dumps({"model": "mock-llm", "max_tokens": 1,
                           "messages": [{"role": "user", "content": f"{self._n:06x} which pod?"}]}).encode()
        headers = [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "bench"),
                   ("content-type", "application/json"), ("content-length", str(len(body)))]
        if force:
            headers.append((TEST_HEADER, force))
        header_map = base.HeaderMap(headers=[base.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers])
        requests = [ep.ProcessingRequest(request_headers=ep.HttpHeaders(headers=header_map)),
                    ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True))]
        for answer in self._stub.Process(iter(requests), timeout=timeout_s):
            if answer.HasField("immediate_response"):
                return f"refused:{answer.immediate_response.status.code}"
            for mutation in (answer.request_headers.response.header_mutation,
                             answer.request_body.response.header_mutation):
                for h in mutation.set_headers:
                    if h.header.key == DESTINATION:
                        return (h.header.raw_value or h.header.value.encode()).decode().split(",")[0]
        return "none"


def decision_latency(port: int, picks: int) -> tuple[dict, list[str]]:
    picker = Picker(port)
    try:
        for _ in range(20):  # warm the channel and the EPP
            picker.pick()
        took, chosen = [], []
        deadline = time.monotonic() + 120
        for _ in range(picks):
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            chosen.append(picker.pick())
            took.append((time.perf_counter() - t0) * 1000)
    finally:
        picker.close()
    return summary(took), chosen


def convergence(port: int, objects: InferencePoolObjects, victim: str, address: str, ready: bool,
                settle_picks: int = 20, timeout_s: float = 15.0) -> float:
    """Seconds from the status write being sent to the first pick of the steady state after it."""
    picker = Picker(port)
    picks: list[tuple[float, bool]] = []  # (start, picked the victim)
    stop = threading.Event()

    def probe() -> None:
        deadline = time.monotonic() + timeout_s
        while not stop.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                picks.append((t0, picker.pick(force=address) == address))
            except Exception:  # a refusal as an error status: not the victim
                picks.append((t0, False))

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    time.sleep(0.3)
    sent = time.monotonic()
    objects.set_ready(victim, ready)
    deadline = sent + timeout_s
    while time.monotonic() < deadline:
        after = [hit for t, hit in picks if t >= sent]
        if len(after) >= settle_picks and all(hit == ready for hit in after[-settle_picks:]):
            break
        time.sleep(0.02)
    stop.set()
    thread.join(timeout_s)
    picker.close()
    after = [(t, hit) for t, hit in picks if t >= sent]
    steady = len(after)
    while steady > 0 and after[steady - 1][1] == ready:
        steady -= 1
    if steady == len(after):
        return float("nan")  # never reached
    return round(after[steady][0] - sent, 4)


# -- the parts -----------------------------------------------------------------------------------------

@dataclass
class Bench:
    work: Path
    ports: PortAllocator = field(default_factory=PortAllocator)
    procs: list[ManagedProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: list[str], env: dict[str, str], ready, hint: str = "") -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.work / f"{name}.log").with_env(**env).start()
        self.procs.append(proc)
        return proc.wait_ready(ready, hint=hint)

    def stop(self, proc: ManagedProcess) -> None:
        proc.stop()
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def mocks(self, hosts: list[str], port: int) -> list[ManagedProcess]:
        started = []
        for k, first in enumerate(range(0, len(hosts), PER_MOCK)):
            group = hosts[first:first + PER_MOCK]
            argv = service_argv("eppkit.services.vllm", port, ["--instance", f"mock-{k}", "--time-to-first-token", "0"],
                                host=",".join(group))
            started.append(self.start(f"mock-{k}", argv, {"EPPKIT_OTLP_ENDPOINT": "", "OTEL_SDK_DISABLED": "true"},
                                      HttpReady(f"http://{group[0]}:{port}/health", timeout_s=60)))
        return started

    def epp(self, which: str, target: PoolTarget, pods: int, *, conformance: bool = False) -> tuple[ManagedProcess, int]:
        grpc_port, health, metrics = self.ports.port(), self.ports.port(), self.ports.port()
        interval = refresh_s(pods)
        if which == "gaie-epp":
            options = gaie_epp.GaieEppOptions(conformance=conformance, refresh_metrics_interval=f"{int(interval * 1000)}ms",
                                              epp_args=["--tracing=false"])
            argv = gaie_epp.epp_argv(str(gaie_build.build(print)), options,
                                     {"grpc": grpc_port, "health": health, "metrics": metrics}, target)
            ready = GrpcHealthReady("127.0.0.1", health, timeout_s=120)
        else:
            argv = [sys.executable, "-m", "eppkit.services.epp", "--host", "127.0.0.1", "--port", str(grpc_port),
                    "--kubeconfig", target.kubeconfig, "--pool-namespace", target.namespace, "--pool-name", target.name,
                    "--metrics-interval", f"{interval:g}", "--log-level", "WARNING"]
            ready = GrpcHealthReady("127.0.0.1", grpc_port, timeout_s=120)
        name = f"{which}{'-conformance' if conformance else ''}-{pods}"
        env = {"KUBECONFIG": target.kubeconfig, "OTEL_SDK_DISABLED": "true", "EPPKIT_OTLP_ENDPOINT": ""}
        return self.start(name, argv, env, ready, hint=" ".join(argv)), grpc_port


def start_per_session(work: Path, which: str, repeat: int) -> dict:
    """Control plane from nothing, then a pool of 2 pods, then the EPP until SERVING, ``repeat`` times."""
    runs = []
    for i in range(repeat):
        bench = Bench(work / f"start-{which}-{i}")
        t0 = time.monotonic()
        plane = ControlPlane(bench.work / "control-plane", ports=bench.ports, progress=lambda _: None)
        try:
            plane.start()
            t_plane = time.monotonic()
            namespace = plane.new_namespace("bench")
            target = PoolTarget(str(plane.write_kubeconfig(bench.work / "kubeconfig", namespace)), namespace)
            objects = InferencePoolObjects(plane, namespace)
            objects.create([bench.ports.port()], 9002, [("vllm-0", "127.0.0.2"), ("vllm-1", "127.0.0.3")])
            t_pool = time.monotonic()
            bench.epp(which, target, 2)
            t_epp = time.monotonic()
            objects.close()
            runs.append({"control_plane_s": round(t_plane - t0, 3), "pool_s": round(t_pool - t_plane, 3),
                         "epp_s": round(t_epp - t_pool, 3), "total_s": round(t_epp - t0, 3),
                         "phases": plane.phases, "load": loadavg()})
        finally:
            bench.stop_all()
            plane.stop()
    keys = ("control_plane_s", "pool_s", "epp_s", "total_s")
    return {"runs": runs, **{k: summary([r[k] for r in runs]) for k in keys}}


def per_size(work: Path, plane: ControlPlane, pods: int, picks: int, flips: int) -> dict:
    bench = Bench(work / f"size-{pods}")
    out: dict = {"pods": pods, "refresh_s": refresh_s(pods), "load_at_start": loadavg()}
    namespace = plane.new_namespace(f"bench-{pods}")
    target = PoolTarget(str(plane.write_kubeconfig(bench.work / "kubeconfig", namespace)), namespace)
    objects = InferencePoolObjects(plane, namespace)
    hosts = [pod_address(i) for i in range(pods)]
    port = bench.ports.shared_port(hosts)
    try:
        t0 = time.monotonic()
        objects.create([port], 9002, [(f"vllm-{i}", host) for i, host in enumerate(hosts)])
        out["pool_create_s"] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        bench.mocks(hosts, port)
        out["mocks_start_s"] = round(time.monotonic() - t0, 2)
        for which in EPPS:
            t0 = time.monotonic()
            proc, grpc_port = bench.epp(which, target, pods)
            entry: dict = {"serving_s": round(time.monotonic() - t0, 3)}
            meter = CpuMeter({"epp": proc.pid}).start(time.monotonic())
            time.sleep(SETTLE_S)
            entry["settle_cpu_pct"] = meter.stop(time.monotonic()).get("epp", {}).get("cpu_pct")
            entry["rss_mib"] = round(memory_kib(proc.pid).get("VmRSS", 0) / 1024, 1)
            entry["decision_ms"], chosen = decision_latency(grpc_port, picks)
            entry["distinct_picked"] = len(set(chosen))
            entry["rss_mib_after_picks"] = round(memory_kib(proc.pid).get("VmRSS", 0) / 1024, 1)
            if which == "gaie-epp":  # GAIE's EPP honours the test header only with its conformance config
                bench.stop(proc)
                proc, grpc_port = bench.epp(which, target, pods, conformance=True)
            flips_out, back = [], []
            for k in range(flips):
                index = (k * 7919) % pods
                victim, address = f"vllm-{index}", f"{hosts[index]}:{port}"
                flips_out.append(convergence(grpc_port, objects, victim, address, ready=False))
                back.append(convergence(grpc_port, objects, victim, address, ready=True))
            entry["not_ready_to_unpicked_s"] = summary([v for v in flips_out if v == v])
            entry["ready_to_picked_s"] = summary([v for v in back if v == v])
            entry["convergence_missed"] = sum(v != v for v in flips_out + back)
            bench.stop(proc)
            out[which] = entry
        out["control_plane_rss_mib"] = {name: round(memory_kib(p.pid).get("VmRSS", 0) / 1024, 1)
                                        for name, p in plane.processes().items()}
    finally:
        bench.stop_all()
        objects.delete_all()
        objects.close()
    out["load_at_end"] = loadavg()
    return out


def cold_build(work: Path) -> dict:
    """kube-apiserver and etcd built from an empty Go module cache and build cache (throwaway)."""
    env = {**os.environ, "GOCACHE": str(work / "gocache"), "GOMODCACHE": str(work / "gomodcache"),
           "EPPKIT_CACHE": str(work / "cache")}
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "eppkit.builds.controlplane"], env=env, check=True, timeout=3600)
    seconds = time.monotonic() - t0
    subprocess.run(["chmod", "-R", "u+w", str(work / "gomodcache")], check=False)
    return {"seconds": round(seconds, 1), "load_at_end": loadavg()}


# -- report --------------------------------------------------------------------------------------------

def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, kernel {m['kernel']}; "
             f"load average at start {m['loadavg_at_start']}, at end {result['loadavg_at_end']}.", ""]
    build = result.get("build", {})
    if build:
        lines += [f"Build: {build}", ""]
    if result.get("start"):
        lines += ["**Control plane start → EPP SERVING** (per session; median, min-max of "
                  f"{result['starts']}; seconds):", "",
                  "| EPP | control plane ready | pool + 2 pods | EPP exec → SERVING | total |", "|---|--:|--:|--:|--:|"]
        for which, s in result["start"].items():
            cells = [f"{s[k]['p50']:.2f} ({s[k]['min']:.2f}-{s[k]['max']:.2f})"
                     for k in ("control_plane_s", "pool_s", "epp_s", "total_s")]
            lines.append(f"| {which} | " + " | ".join(cells) + " |")
        lines.append("")
    if result.get("sizes"):
        lines += ["**Against pool size** (decision: ms, p50 / p90 / p99 of one ext_proc stream asked directly; "
                  "convergence: s, p50 (max) from the status write to the steady state):", "",
                  "| pods | EPP | scrape every | decision p50 / p90 / p99 | RSS MiB | CPU % settled | not Ready → "
                  "not picked | Ready → picked | pool created in |", "|--:|---|--:|---|--:|--:|--:|--:|--:|"]
        for size in result["sizes"]:
            for which in EPPS:
                e = size[which]
                d = e["decision_ms"]
                nr, rp = e["not_ready_to_unpicked_s"], e["ready_to_picked_s"]
                lines.append(f"| {size['pods']} | {which} | {size['refresh_s']:g} s | {d['p50']:.2f} / {d['p90']:.2f} / "
                             f"{d['p99']:.2f} | {e['rss_mib']:.0f} | {e['settle_cpu_pct']} | {nr['p50']:.3f} "
                             f"({nr['max']:.3f}) | {rp['p50']:.3f} ({rp['max']:.3f}) | {size['pool_create_s']:.1f} s |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.controlplane", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,100,1000", help="pool sizes; '' for none (default: %(default)s)")
    ap.add_argument("--starts", type=int, default=5, help="control plane starts per EPP (default: %(default)s)")
    ap.add_argument("--picks", type=int, default=300, help="picks per EPP and size (default: %(default)s)")
    ap.add_argument("--flips", type=int, default=5, help="not Ready / Ready flips per EPP and size (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="sizes 1,100; 2 starts, 100 picks, 2 flips")
    ap.add_argument("--cold-build", action="store_true", help="also build etcd and kube-apiserver from empty Go caches")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.starts, args.picks, args.flips = "1,100", 2, 100, 2
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]  # "": the start per session only
    if not all(1 <= s <= 5000 for s in sizes) or not 1 <= args.starts <= 20 or not 1 <= args.flips <= 20:
        ap.error("--sizes each 1..5000, --starts 1..20, --flips 1..20")
    binaries = cp_build.build(print)
    gaie_build.build(print)
    work = Path(tempfile.mkdtemp(prefix="eppkit-bench-controlplane-"))
    result: dict = {"machine": machine(), "starts": args.starts, "versions": cp_build.versions(binaries)}
    info = binaries.etcd.parent / "build-info.json"
    if info.is_file():
        result["build"] = {"last_build_here_s": json.loads(info.read_text()).get("seconds")}
    try:
        if args.cold_build:
            result.setdefault("build", {})["cold"] = cold_build(work / "cold")
        result["start"] = {which: start_per_session(work, which, args.starts) for which in EPPS}
        if sizes:
            plane = ControlPlane(work / "control-plane", progress=lambda _: None).start()
            try:
                result["sizes"] = [per_size(work, plane, n, args.picks, args.flips) for n in sizes]
            finally:
                plane.stop()
    finally:
        result["loadavg_at_end"] = loadavg()
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (RESULTS / f"controlplane-{stamp}.json").write_text(json.dumps(result, indent=1) + "\n")
        text = markdown(result)
        (RESULTS / f"controlplane-{stamp}.md").write_text(text + "\n")
        print(text)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
