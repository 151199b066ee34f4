"""What each integration mode adds to a request, what the picker costs, and what tracing costs.

Every mode gets a testbed (two mock vLLMs answering at once: TTFT 0, ITL 0, so the backend
adds as little as it can); all of them run at once, idle but for the one being measured, and
for each rate and request kind vegeta drives them **in turns**: three slices per mode, the
order rotating each round, each mode's slices merged. So the figures compared in one row
were taken within seconds of each other, and a change in the machine's load (other people's
test runs) hits every mode alike. Two request kinds:

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
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

import requests
from eppkit.observability import steps as st
from eppkit.observability.trace_model import from_jaeger_json
from eppkit.services.vllm.config import MockLatency

from bench.loadgen import AttackResult, Target, Vegeta, merge
from bench.system import CpuMeter, cpu_seconds, loadavg
from eppkit.runtimes import create
from eppkit.topology import Topology, VllmSpec

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
                    latency=MockLatency(time_to_first_token=0.0, inter_token_latency=0.0), options={"tracing": tracing})


def read_steps(api_url: str, mode: str, windows: list, limit: int) -> dict:
    """decision / roundtrip / gateway percentiles of Envoy's traces in the windows (``limit`` in all)."""
    values: dict[str, list[float]] = {"decision": [], "roundtrip": [], "gateway": []}
    seen: set[str] = set()
    per_window = max(1, limit // max(1, len(windows)))
    for start_unix, end_unix in windows:
        # Every testbed's Envoy reports as "envoy" to the one Jaeger: its eppkit.mode tag tells them apart.
        params = {"service": "envoy", "operation": "ingress", "start": int(start_unix * 1e6),
                  "end": int(end_unix * 1e6) + 1, "limit": per_window, "tags": json.dumps({"eppkit.mode": mode})}
        resp = requests.get(f"{api_url}/api/traces", params=params, timeout=60)
        resp.raise_for_status()
        for raw in resp.json().get("data") or []:
            if raw.get("traceID") in seen:
                continue
            seen.add(raw.get("traceID"))
            for name, ms in st.step_durations(from_jaeger_json(raw), mode).items():
                if name in values:
                    values[name].append(ms)
    return {"traces": len(seen), **{k: st.summarize(v) for k, v in values.items() if v}}


def _pids(bed, jaeger) -> dict[str, int | None]:
    pids = {name: h.process.pid for name, h in bed.services.items()}
    pids["envoy"] = bed.envoy.process.pid if bed.envoy else None
    if jaeger is not None and jaeger.process is not None:
        pids["jaeger"] = jaeger.process.pid
    return pids


def _idle_rates(pids_by_mode: dict[str, dict[str, int | None]], seconds: float = 1.5) -> tuple[dict[str, float], float]:
    """Idle background, CPU-seconds per second: of each mode's picker processes (metrics scrapes),
    and of every testbed process together (what the idle testbeds cost the one being measured)."""
    every = {(m, n): pid for m, pids in pids_by_mode.items() for n, pid in pids.items() if pid and n != "jaeger"}
    before = {k: cpu_seconds(pid) or 0.0 for k, pid in every.items()}
    time.sleep(seconds)
    used = {k: max(0.0, (cpu_seconds(pid) or 0.0) - before[k]) / seconds for k, pid in every.items()}
    pickers = {m: sum(v for (mm, n), v in used.items() if mm == m and n in PICKER_PROCESSES) for m in pids_by_mode}
    return pickers, sum(used.values())


def picker_cost(result: AttackResult, idle_rate: float) -> dict | None:
    """Picker CPU per decision, with the idle background (metrics scrapes) taken out."""
    names = [n for n in PICKER_PROCESSES if n in result.cpu]
    if not names or result.ok == 0:
        return None
    used = sum(result.cpu[n]["cpu_s"] for n in names)
    idle = idle_rate * (result.meter_wall_s or result.wall_s)
    busy = max(0.0, used - idle)
    return {"processes": names, "cpu_s": round(used, 3), "idle_cpu_s": round(idle, 3),
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


@dataclass
class GroupRun:
    """Every mode's testbed up at once, measured in turns: the figures of one row of the table were
    taken within seconds of the others', so a change in the machine's load hits every mode alike."""

    tracing: bool
    runs: dict[str, ModeRun] = field(default_factory=dict)
    idle_testbeds_cpu_pct: float = 0.0
    rounds: int = 0


def run_group(vegeta: Vegeta, jaeger, cfg: OverheadConfig, modes: tuple[str, ...], *, tracing: bool,
              rates: tuple[float, ...], saturation_modes: tuple[str, ...], rounds: int,
              progress: Callable[[str], None], left: Callable[[], float]) -> GroupRun:
    """Start a testbed per mode, then for each (kind, rate) send the load to every mode in turn,
    ``rounds`` slices each (the order rotates every round), and merge each mode's slices."""
    group = GroupRun(tracing=tracing, rounds=rounds)
    label = f"tracing {'on' if tracing else 'off'}"
    with ExitStack() as stack:
        beds = {}
        for mode in modes:
            run = group.runs[mode] = ModeRun(mode=mode, tracing=tracing)
            t0 = time.monotonic()
            progress(f"  [{label}] starting {mode} ...")
            try:
                beds[mode] = stack.enter_context(create(topology(mode, cfg.backends, tracing), runtime="local", jaeger=jaeger))
            except Exception as exc:  # a mode that cannot start is reported; the others go on
                run.error = f"{type(exc).__name__}: {exc}"[:2000]
                progress(f"  [{label}] {mode}: FAILED to start: {run.error.splitlines()[0][:200]}")
                continue
            run.startup_s = round(time.monotonic() - t0, 1)
        pids = {m: _pids(bed, jaeger) for m, bed in beds.items()}
        plans: dict[str, dict[str, list[tuple[str, list[Target]]]]] = {}
        for mode, bed in beds.items():
            plans[mode] = {}
            for kind in cfg.kinds:
                plan = [("envoy", [Target(bed.envoy_url + "/v1/chat/completions", *request(kind))])]
                if mode == "direct":
                    plan.append(("floor", [Target(f"http://{b.address}/v1/chat/completions", *request(kind))
                                           for b in bed.backends]))
                plans[mode][kind] = plan
        # Warm-up, not counted: connection pools, the ext_proc stream, the Lua VM, Python's first paths.
        for mode in beds:
            for kind in cfg.kinds:
                for where, targets in plans[mode][kind]:
                    try:
                        vegeta.attack(targets, rate=50, duration_s=0.6, name=f"warmup-{mode}-{kind}-{where}",
                                      timeout_s=cfg.timeout_s)
                    except RuntimeError as exc:
                        group.runs[mode].error = f"warm-up failed: {exc}"[:2000]
        live = [m for m in modes if m in beds and not group.runs[m].error]
        idle_pickers, idle_all = _idle_rates({m: pids[m] for m in live})
        group.idle_testbeds_cpu_pct = round(100.0 * idle_all, 1)
        for m in live:
            group.runs[m].idle_picker_cpu_pct = round(100.0 * idle_pickers[m], 1)
            group.runs[m].loadavg = loadavg()
        for kind in cfg.kinds:
            for rate in rates:
                duration = duration_for(cfg, rate)
                slice_s = round(duration / rounds, 2)
                needed = (duration + 0.6 * rounds) * sum(len(plans[m][kind]) for m in live) + 15
                if left() < needed:
                    for m in live:
                        group.runs[m].attacks.append({"kind": kind, "rate": rate, "target": "envoy", "skipped": "deadline"})
                    continue
                progress(f"  [{label}] {kind} at {rate:g} rps: {len(live)} modes x {rounds} slices of {slice_s:g} s ...")
                parts: dict[tuple[str, str], list[AttackResult]] = {}
                for r in range(rounds):
                    for mode in live[r % len(live):] + live[:r % len(live)]:
                        for where, targets in plans[mode][kind]:
                            res = vegeta.attack(targets, rate=rate, duration_s=slice_s, timeout_s=cfg.timeout_s,
                                                name=f"{mode}-{kind}-{rate:g}-{where}-{r}", meter=CpuMeter(pids[mode]))
                            parts.setdefault((mode, where), []).append(res)
                            time.sleep(0.3)  # the last answers drain before the next mode's slice
                for (mode, where), slices in parts.items():
                    res = merge(slices)
                    entry = {"kind": kind, "rate": rate, "target": where, **res.to_json(), "loadavg": loadavg()}
                    if where == "envoy":
                        entry["picker"] = picker_cost(res, idle_pickers[mode])
                    group.runs[mode].attacks.append(entry)
        for mode in (m for m in saturation_modes if m in live):
            if cfg.saturation_s <= 0 or left() < cfg.saturation_s + 15:
                continue
            progress(f"  [{label}] {mode}: saturation, {cfg.saturation_workers} requests in flight for {cfg.saturation_s:g} s ...")
            res = vegeta.attack(plans[mode]["chat"][0][1], rate=0, duration_s=cfg.saturation_s, name=f"{mode}-saturation",
                                max_workers=cfg.saturation_workers, timeout_s=cfg.timeout_s, meter=CpuMeter(pids[mode]))
            entry = {"kind": "chat", "rate": 0, "target": "envoy", "saturation": True, **res.to_json(),
                     "workers": cfg.saturation_workers, "loadavg": loadavg()}
            entry["picker"] = picker_cost(res, idle_pickers[mode])
            group.runs[mode].attacks.append(entry)
        if tracing:
            time.sleep(1.5)  # Envoy flushes spans every 200 ms, services every 200 ms; Jaeger indexes them
            progress(f"  [{label}] reading decision spans back from Jaeger ...")
            for mode in live:
                for entry in group.runs[mode].attacks:
                    if entry.get("target") != "envoy" or "skipped" in entry or not entry.get("ok"):
                        continue
                    try:
                        entry["steps"] = read_steps(jaeger.api_url, mode, entry["windows"],
                                                    min(cfg.trace_sample, entry["ok"]))
                    except (requests.RequestException, ValueError) as exc:
                        entry["steps"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return group
