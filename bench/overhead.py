"""What each integration mode adds to a request, what the picker costs, and what tracing costs.

For each mode a testbed (two mock vLLMs answering at once: TTFT 0, ITL 0, so the backend
adds as little as it can) is driven by vegeta at fixed rates, with two request kinds:

- ``chat``: non-streaming chat completion, 8 tokens in one JSON answer;
- ``stream``: streaming chat completion, 16 tokens 1 ms apart (``x-mock-itl-ms: 1``), so Envoy
  and every filter handle a real SSE stream of 18 chunks.

In the ``direct`` testbed the same load also goes straight to the two mocks (vegeta round-robins
over them as Envoy does): the physical floor. Added latency of a mode = its latency minus
``direct``'s at the same rate, kind and tracing setting; ``direct``'s own = minus the floor.

With tracing on, the picker's decision (``epp.pick``, ``frontend.route``, ``callout.pick``),
Envoy's call to it (``roundtrip``) and Envoy's time before the upstream (``gateway``) are read
from the traces with observability.steps — the same step extraction as ``eppkit compare``.
Every run records each component's CPU from /proc, so a reader sees which one saturated.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

import requests

from bench.loadgen import AttackResult, Target, Vegeta
from bench.system import CpuMeter, cpu_seconds, loadavg
from observability import steps as st
from observability.trace_model import from_jaeger_json
from testbed import create
from testbed.topology import Topology, VllmSpec

KINDS = ("chat", "stream")
PICKER_PROCESSES = ("epp", "frontend", "callout")
PROMPT = ("explain how an inference gateway picks an endpoint for a chat request and why the "
          "prefix cache matters when many requests share a long system prompt")


def request(kind: str) -> tuple[bytes, dict[str, str]]:
    """The one request body (and headers) every mode gets for ``kind``."""
    stream = kind == "stream"
    body = {"model": "mock-llm", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 16 if stream else 8, "stream": stream, "seed": 7}
    headers = {"x-mock-itl-ms": "1"} if stream else {}
    return json.dumps(body).encode(), headers


@dataclass
class OverheadConfig:
    modes: tuple[str, ...]
    rates: tuple[float, ...] = (50, 200, 500)
    kinds: tuple[str, ...] = KINDS
    min_duration_s: float = 3.0  # per attack
    min_requests: int = 200  # per attack: duration = max(min_duration_s, min_requests / rate)
    tracing_off_rates: tuple[float, ...] = (200,)
    saturation_s: float = 3.0  # closed-loop run against ext_proc; 0: skip
    saturation_workers: int = 32
    backends: int = 2
    trace_sample: int = 1000  # traces read back per attack at most
    timeout_s: float = 10.0


def duration_for(cfg: OverheadConfig, rate: float) -> float:
    return round(max(cfg.min_duration_s, cfg.min_requests / rate), 1)


def topology(mode: str, backends: int, tracing: bool) -> Topology:
    return Topology(mode=mode, vllm=[VllmSpec(name=f"vllm-{i}") for i in range(backends)],
                    time_to_first_token_ms=0.0, inter_token_latency_ms=0.0, options={"tracing": tracing})


def read_steps(api_url: str, mode: str, start_unix: float, end_unix: float, limit: int) -> dict:
    """decision / roundtrip / gateway percentiles of Envoy's traces that started in the window."""
    params = {"service": "envoy", "operation": "ingress", "start": int(start_unix * 1e6),
              "end": int(end_unix * 1e6) + 1, "limit": limit}
    resp = requests.get(f"{api_url}/api/traces", params=params, timeout=60)
    resp.raise_for_status()
    values: dict[str, list[float]] = {"decision": [], "roundtrip": [], "gateway": []}
    traces = resp.json().get("data") or []
    for raw in traces:
        for name, ms in st.step_durations(from_jaeger_json(raw), mode).items():
            if name in values:
                values[name].append(ms)
    return {"traces": len(traces), **{k: st.summarize(v) for k, v in values.items() if v}}


def _pids(bed, jaeger) -> dict[str, int | None]:
    pids = {name: h.process.pid for name, h in bed.services.items()}
    pids["envoy"] = bed.envoy.process.pid if bed.envoy else None
    if jaeger is not None and jaeger.process is not None:
        pids["jaeger"] = jaeger.process.pid
    return pids


def _idle_picker_rate(pids: dict[str, int | None], seconds: float = 1.5) -> float:
    """Background CPU of the picker processes (metrics scrapes), CPU-seconds per second."""
    names = [n for n in PICKER_PROCESSES if pids.get(n)]
    if not names:
        return 0.0
    before = sum(cpu_seconds(pids[n]) or 0.0 for n in names)
    time.sleep(seconds)
    after = sum(cpu_seconds(pids[n]) or 0.0 for n in names)
    return max(0.0, (after - before) / seconds)


def picker_cost(result: AttackResult, idle_rate: float) -> dict | None:
    """Picker CPU per decision, with the idle background (metrics scrapes) taken out."""
    names = [n for n in PICKER_PROCESSES if n in result.cpu]
    if not names or result.ok == 0:
        return None
    used = sum(result.cpu[n]["cpu_s"] for n in names)
    busy = max(0.0, used - idle_rate * result.wall_s)
    return {"processes": names, "cpu_s": round(used, 3), "idle_cpu_s": round(idle_rate * result.wall_s, 3),
            "cpu_ms_per_decision": round(1000.0 * busy / result.ok, 3),
            "cpu_s_per_1000": round(1000.0 * busy / result.ok, 3),
            "cpu_pct": round(sum(result.cpu[n]["cpu_pct"] for n in names), 1)}


@dataclass
class ModeRun:
    mode: str
    tracing: bool
    attacks: list[dict] = field(default_factory=list)
    error: str | None = None
    startup_s: float = 0.0
    idle_picker_cpu_pct: float = 0.0
    loadavg: list[float] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"mode": self.mode, "tracing": self.tracing, "attacks": self.attacks, "error": self.error,
                "startup_s": self.startup_s, "idle_picker_cpu_pct": self.idle_picker_cpu_pct,
                "loadavg": self.loadavg}


def run_mode(vegeta: Vegeta, jaeger, cfg: OverheadConfig, mode: str, *, tracing: bool,
             rates: tuple[float, ...], saturation: bool, progress: Callable[[str], None],
             left: Callable[[], float]) -> ModeRun:
    run = ModeRun(mode=mode, tracing=tracing)
    label = f"{mode} (tracing {'on' if tracing else 'off'})"
    t0 = time.monotonic()
    try:
        with create(topology(mode, cfg.backends, tracing), runtime="local", jaeger=jaeger) as bed:
            run.startup_s = round(time.monotonic() - t0, 1)
            pids = _pids(bed, jaeger)
            via_envoy = {k: [Target(bed.envoy_url + "/v1/chat/completions", *request(k))] for k in cfg.kinds}
            floor = {k: [Target(f"http://{b.address}/v1/chat/completions", *request(k)) for b in bed.backends]
                     for k in cfg.kinds} if mode == "direct" else {}
            # Warm-up, not counted: connection pools, the ext_proc stream, the Lua VM, Python's first paths.
            for k in cfg.kinds:
                vegeta.attack(via_envoy[k], rate=50, duration_s=1.0, name=f"warmup-{mode}-{k}", timeout_s=cfg.timeout_s)
                if floor:
                    vegeta.attack(floor[k], rate=50, duration_s=0.5, name=f"warmup-floor-{k}", timeout_s=cfg.timeout_s)
            idle = _idle_picker_rate(pids)
            run.idle_picker_cpu_pct = round(100.0 * idle, 1)
            run.loadavg = loadavg()
            for kind in cfg.kinds:
                for rate in rates:
                    duration = duration_for(cfg, rate)
                    if left() < duration + 15:
                        run.attacks.append({"kind": kind, "rate": rate, "target": "envoy", "skipped": "deadline"})
                        continue
                    plan = [("envoy", via_envoy[kind])] + ([("floor", floor[kind])] if floor else [])
                    for where, targets in plan:
                        progress(f"  {label}: {kind} at {rate:g} rps via {where} for {duration:g} s ...")
                        res = vegeta.attack(targets, rate=rate, duration_s=duration, name=f"{mode}-{kind}-{rate:g}-{where}",
                                            timeout_s=cfg.timeout_s, meter=CpuMeter(pids))
                        entry = {"kind": kind, "rate": rate, "target": where, **res.to_json(), "loadavg": loadavg()}
                        if where == "envoy":
                            entry["picker"] = picker_cost(res, idle)
                        run.attacks.append(entry)
                        time.sleep(0.5)  # let the last answers drain before the next rate
            if saturation and cfg.saturation_s > 0 and left() > cfg.saturation_s + 15:
                progress(f"  {label}: saturation, {cfg.saturation_workers} requests in flight for {cfg.saturation_s:g} s ...")
                res = vegeta.attack(via_envoy["chat"], rate=0, duration_s=cfg.saturation_s, name=f"{mode}-saturation",
                                    max_workers=cfg.saturation_workers, timeout_s=cfg.timeout_s, meter=CpuMeter(pids))
                entry = {"kind": "chat", "rate": 0, "target": "envoy", "saturation": True, **res.to_json(),
                         "workers": cfg.saturation_workers, "loadavg": loadavg()}
                entry["picker"] = picker_cost(res, idle)
                run.attacks.append(entry)
            if tracing:
                time.sleep(1.5)  # Envoy flushes spans every 200 ms, services every 200 ms; Jaeger indexes them
                progress(f"  {label}: reading decision spans back from Jaeger ...")
                for entry in run.attacks:
                    if entry.get("target") != "envoy" or "skipped" in entry or not entry.get("ok"):
                        continue
                    try:
                        entry["steps"] = read_steps(jaeger.api_url, mode, entry["start_unix"], entry["end_unix"],
                                                    min(cfg.trace_sample, entry["ok"]))
                    except (requests.RequestException, ValueError) as exc:
                        entry["steps"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    except Exception as exc:  # a mode that cannot run is reported, the suite goes on
        run.error = f"{type(exc).__name__}: {exc}"[:2000]
        progress(f"  {label}: FAILED: {run.error.splitlines()[0][:200]}")
    return run
