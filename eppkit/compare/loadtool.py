"""The same workload driven by an outside load tool: inference-perf against each mode's testbed, its figures beside
the kit's, and where the two disagree.

After the kit has measured a mode (and read its traces), ``eppkit compare --load-tool inference-perf`` hands
the same testbed to inference-perf 0.7.0 (installed once into the cache, offline: eppkit.builds.inference_perf)
with the same requests:

- the same prompts and output lengths: the kit's planned requests become a local ShareGPT file (prompt, and an
  answer of the planned length, which sets ``max_tokens``), read by inference-perf's ``shareGPT`` data
  generator. It sends them to ``/v1/completions``: 0.7.0's offline chat generator sends every turn as a
  message and ``max_tokens`` 30 whatever the data, so only the completions API carries the kit's token
  distributions. The mock serves both APIs with the same timing;
- the same load: a closed loop of ``--concurrency`` in flight (``load.type: concurrent``), or, with
  ``--rate``, a constant rate for requests/rate seconds (inference-perf caps nothing in flight then);
- the same objective: ``--slo`` as its goodput constraints;
- a tokenizer that counts one token per word or punctuation mark, as the mock does.

Its requests carry no trace context, so Envoy starts each one's trace; the cross-check counts them in Jaeger.
Then each figure both tools report is set side by side with its tolerance (:data:`FIGURES`), and the inter-token
latency of both against the mock's configured one. A disagreement is reported, not raised: the report says
where the two differ.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests
import yaml

from eppkit.builds import inference_perf as ip
from eppkit.compare.loadmetrics import STREAMED_ONLY, Slo
from eppkit.compare.tables import Table, fmt, pct
from eppkit.core import procfs
from eppkit.core.polling import PollTimeout, poll
from eppkit.observability.contract import Envoy, Service

TEARDOWN_GRACE_S = 10  # inference-perf waits this long for requests in flight after its stage (its default: 120)
STARTUP_S = 60  # its imports (5-8 s warm), tokenizer, report writing and exit, generously
TRACE_WAIT_S = 10.0  # for Envoy's last spans of the tool's requests to reach Jaeger


@dataclass(frozen=True)
class Figure:
    """One figure both tools report: how to read it from the kit's mode result and from inference-perf's summary,
    and how far apart the two may be (the larger of ``abs`` and ``rel`` x the kit's value)."""

    name: str
    unit: str
    kit: Callable[[dict], float | None]
    tool: Callable[[dict], float | None]
    abs: float = 0.0
    rel: float = 0.0
    digits: int = 1
    why: Callable[[dict, dict], str] | None = None  # what a disagreement comes from, in numbers of both

    def tolerance(self, kit: float) -> float:
        return max(self.abs, self.rel * abs(kit))

    def tolerance_text(self) -> str:
        parts = ([f"{self.abs:g}{' ' + self.unit if self.unit else ''}"] if self.abs else []) + (
            [f"{self.rel:.0%}"] if self.rel else [])
        return "exact" if not parts else parts[0] if len(parts) == 1 else f"max({', '.join(parts)})"


def _get(data: dict, *path: str) -> float | None:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, (int, float)) else None


def _seconds(*path: str) -> Callable[[dict], float | None]:
    def read(summary: dict) -> float | None:
        value = _get(summary, "successes", *path)
        return None if value is None else value * 1000
    return read


def _ratio(summary: dict) -> float | None:
    value = _get(summary, "successes", "goodput_metrics", "goodput_percentage")
    return None if value is None else value / 100


# What both report, and how far apart they may be. TTFT and e2e p50: a few ms of client time differ (the
# kit's clock starts with its span, inference-perf's before its POST); ITL, TPOT, tokens/s: 10 %.
FIGURES = (
    Figure("TTFT p50", "ms", lambda r: _get(r, "steps", "ttft", "p50"),
           _seconds("latency", "time_to_first_token", "median"), abs=5.0, rel=0.05),
    Figure("ITL mean", "ms", lambda r: _get(r, "load_metrics", "itl", "mean"),
           _seconds("latency", "inter_token_latency", "mean"), rel=0.10, digits=2),
    Figure("TPOT mean", "ms", lambda r: _get(r, "load_metrics", "tpot", "mean"),
           _seconds("latency", "time_per_output_token", "mean"), rel=0.10, digits=2),
    Figure("e2e p50", "ms", lambda r: _get(r, "steps", "e2e", "p50"),
           _seconds("latency", "request_latency", "median"), abs=5.0, rel=0.05),
    Figure("output tokens/s", "", lambda r: _get(r, "throughput", "output_tokens_per_s"),
           lambda s: _get(s, "successes", "throughput", "output_tokens_per_sec"), rel=0.10,
           why=lambda r, s: f"the same requests took the kit {r.get('wall_s', 0):.2f} s and {ip.NAME} "
                            f"{s.get('benchmark_time_seconds') or 0:.2f} s: how tightly each keeps its loop full"),
    Figure("goodput", "", lambda r: _get(r, "load_metrics", "goodput", "ratio"), _ratio, abs=0.05, digits=2),
    Figure("requests ok", "", lambda r: _get(r, "requests", "ok"), lambda s: _get(s, "successes", "count"), digits=0),
    Figure("output tokens", "", lambda r: sum(x.get("tokens") or 0 for x in r.get("samples", []) if x.get("ok")),
           lambda s: _get(s, "successes", "output_tokens", "total"), digits=0),
)
CONFIGURED_ITL_REL = 0.10  # each tool's ITL mean against the mock's --inter-token-latency


class LoadToolError(RuntimeError):
    """The tool did not run or gave no summary; the message carries its log's tail."""


# -- what the tool is given -----------------------------------------------------------------------------------

def unsupported(planned: list) -> str | None:
    """Why these requests cannot be sent by the tool as the kit sends them, or None."""
    if any(r.media_items for r in planned):
        return "the requests carry images, which inference-perf's completions requests cannot"
    if any(not isinstance(r.body.get("messages", [{}])[0].get("content"), str) for r in planned):
        return "the requests are not plain-text chat"
    if any(r.headers for r in planned):
        return "the requests name their priority band in a header, which inference-perf does not send"
    return None


def sharegpt(planned: list) -> list[dict]:
    """The planned requests as ShareGPT records: the prompt, and an answer of the planned output length (the
    tool's tokenizer counts it, and that count becomes ``max_tokens``)."""
    return [{"id": f"eppkit-{r.index}", "conversations": [
        {"from": "human", "value": r.body["messages"][0]["content"]},
        {"from": "gpt", "value": " ".join(["the"] * r.body["max_tokens"])}]} for r in planned]


def config(tool: ip.LoadTool, *, url: str, model: str, data: Path, out: Path, requests: int, concurrency: int,
           rate: float, stream: bool, request_timeout_s: float, seed: int, slo: Slo) -> dict:
    """inference-perf's config (its pydantic schema: unknown keys are errors) for one mode's run."""
    if rate > 0:
        load = {"type": "constant", "stages": [{"rate": rate, "duration": max(1, round(requests / rate))}]}
    else:
        load = {"type": "concurrent", "stages": [{"num_requests": requests, "concurrency_level": concurrency}]}
    constraints = {{"e2e": "request_latency"}.get(k, k): ms / 1000 for k, ms in slo.limits}
    return {
        "api": {"type": "completion", "streaming": stream},
        "server": {"type": "vllm", "base_url": url, "model_name": model, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tool.tokenizer), "load_timeout": 60},
        "data": {"type": "shareGPT", "path": str(data)},
        "load": {**load, "num_workers": 1, "request_timeout": request_timeout_s,
                 "stage_teardown_grace_seconds": TEARDOWN_GRACE_S, "base_seed": seed},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": False},
                   "prometheus": {"summary": False, "per_stage": False},
                   **({"goodput": {"constraints": constraints}} if constraints else {})},
        "storage": {"local_storage": {"path": str(out)}},
    }


# -- running it -----------------------------------------------------------------------------------------------

def run_tool(tool: ip.LoadTool, cfg: dict, folder: Path, *, timeout_s: float) -> dict:
    """Run inference-perf with ``cfg`` in ``folder`` (config, log, reports); its summary. Bounded by ``timeout_s``:
    then its whole process group (it forks workers) is stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg_path = folder / "config.yml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log_path = folder / "inference-perf.log"
    with log_path.open("w") as log, tempfile.TemporaryDirectory(prefix="eppkit-hf-") as hf_home:
        proc = subprocess.Popen([str(tool.command), "-c", str(cfg_path)], cwd=folder, stdout=log,
                                stderr=subprocess.STDOUT, env=tool.env(Path(hf_home)), start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            if proc.poll() is None:
                _stop(proc)
    summary = Path(cfg["storage"]["local_storage"]["path"]) / "summary_lifecycle_metrics.json"
    if rc != 0 or not summary.is_file():
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-30:])
        why = f"timed out after {timeout_s:.0f} s" if rc is None else f"exited {rc}" if rc else "wrote no summary"
        raise LoadToolError(f"{ip.NAME} {why} (log: {log_path}):\n{tail}")
    return json.loads(summary.read_text())


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the tool's process group, a bounded wait until none of it is left, then SIGKILL: its workers must
    not outlive it. The leader's exit is not the end: its workers may still be stopping (CI run D saw one)."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not procfs.group_members(proc.pid):
                return
            time.sleep(0.05)
    try:
        proc.wait(timeout=5.0)  # reaped, whatever is left of its group after SIGKILL
    except subprocess.TimeoutExpired:
        pass


def envoy_rooted_traces(jaeger, start_s: float, end_s: float, want: int) -> int:
    """Traces started by Envoy (its ingress span is the root: the request carried no trace context) between
    ``start_s`` and ``end_s`` (wall clock), waiting up to TRACE_WAIT_S for ``want`` of them."""
    seen = 0

    def count() -> int:
        nonlocal seen
        spans = jaeger.spans_between(Service.ENVOY, int(start_s * 1e6), int(end_s * 1e6), operation=Envoy.INGRESS,
                                     limit=max(want * 2, 20))
        seen = len({s.trace_id for s in spans if s.parent_id is None and s.name == Envoy.INGRESS})
        return seen

    try:
        return poll(count, until=lambda n: n >= want, timeout_s=TRACE_WAIT_S, interval_s=0.5,
                    describe="the load tool's requests in Jaeger", retry_on=(requests.RequestException,))
    except PollTimeout:
        return seen


# -- the cross-check ------------------------------------------------------------------------------------------

def agreement(kit: dict, summary: dict, configured_itl_ms: float | None) -> dict:
    """Each figure of FIGURES from both, the difference, its tolerance, and whether they agree; the ITL means
    against the configured inter-token latency; ``differences``: one sentence per disagreement."""
    figures, differences = {}, []
    for f in FIGURES:
        a, b = f.kit(kit), f.tool(summary)
        row = {"kit": a, "tool": b, "unit": f.unit, "tolerance": f.tolerance_text(), "digits": f.digits}
        if a is None or b is None:
            row["agree"] = None
        else:
            row.update(diff=round(b - a, 4), agree=abs(b - a) <= f.tolerance(a) + 1e-9)
            if not row["agree"]:
                differences.append(f"{f.name}: kit {fmt(a, f.digits)}, {ip.NAME} {fmt(b, f.digits)} {f.unit}".rstrip()
                                   + f" (apart by {fmt(abs(b - a), f.digits)}, tolerance {f.tolerance_text()})"
                                   + (f"; {f.why(kit, summary)}" if f.why else ""))
        figures[f.name] = row
    out = {"figures": figures, "differences": differences}
    if configured_itl_ms:
        itl = {"configured_ms": configured_itl_ms, "tolerance": f"{CONFIGURED_ITL_REL:.0%}"}
        for who, value in (("kit", figures["ITL mean"]["kit"]), ("tool", figures["ITL mean"]["tool"])):
            ok = value is not None and abs(value - configured_itl_ms) <= CONFIGURED_ITL_REL * configured_itl_ms
            itl[who] = {"ms": value, "agree": ok}
            if not ok:
                differences.append(f"ITL mean of {'the kit' if who == 'kit' else ip.NAME}: {fmt(value, 2)} ms, "
                                   f"configured {configured_itl_ms:g} ms (tolerance {CONFIGURED_ITL_REL:.0%})")
        out["configured_itl"] = itl
    mismatches = _get(summary, "successes", "token_count_mismatches")
    if mismatches:
        differences.append(f"{ip.NAME} counted other output tokens than the server reported in {mismatches:g} "
                           "request(s): its tokenizer does not count as the mock does")
    return out


def cross_check(tool: ip.LoadTool | None, *, reason: str, bed, kit: dict, planned: list, model: str, options,
                folder: Path, configured_itl_ms: float | None) -> dict:
    """Run the tool against ``bed`` with the kit's ``planned`` requests and set its figures beside ``kit`` (the
    mode's result). Always returns a result: ``status`` ok, skipped (``reason``) or failed (``error``)."""
    out: dict = {"tool": ip.NAME, "version": ip.VERSION}
    if tool is None:
        return {**out, "status": "skipped", "reason": reason}
    why = unsupported(planned)
    if why:
        return {**out, "status": "skipped", "reason": why}
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "requests.sharegpt.json"
    data.write_text(json.dumps(sharegpt(planned)))
    stream = bool(planned and planned[0].stream)
    slo = Slo.parse(options.slo)
    if not stream:  # as the kit's own goodput: TTFT and TPOT limits cannot be met by answers that are not streamed
        slo = Slo(tuple((k, v) for k, v in slo.limits if k not in STREAMED_ONLY))
        configured_itl_ms = None
    cfg = config(tool, url=bed.envoy_url, model=model, data=data, out=folder / "reports", requests=len(planned),
                 concurrency=options.load.concurrency, rate=options.load.rate, stream=stream,
                 request_timeout_s=options.load.request_timeout_s, seed=options.seed, slo=slo)
    out.update(api="completion", stream=stream, load=cfg["load"], python=tool.python_version)
    timeout_s = STARTUP_S + options.load.max_duration_s + options.load.request_timeout_s + TEARDOWN_GRACE_S
    if options.load.rate > 0:
        timeout_s += len(planned) / options.load.rate
    start, t0 = time.time(), time.monotonic()
    out["load_average"] = round(os.getloadavg()[0], 2)
    try:
        summary = run_tool(tool, cfg, folder, timeout_s=timeout_s)
    except (LoadToolError, OSError, ValueError) as exc:
        return {**out, "status": "failed", "error": str(exc), "wall_s": round(time.monotonic() - t0, 1)}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    ok = int(_get(summary, "successes", "count") or 0)
    out["traced"] = {"ok": ok, "envoy_rooted_traces": envoy_rooted_traces(bed.jaeger, start, time.time(), ok)}
    out["summary"] = {k: summary.get(k) for k in ("benchmark_time_seconds", "successes", "failures")}
    out.update(status="ok", **agreement(kit, summary, configured_itl_ms))
    if out["traced"]["envoy_rooted_traces"] < ok:
        out["differences"].append(f"only {out['traced']['envoy_rooted_traces']} of {ok} {ip.NAME} requests have a "
                                  "trace in Jaeger")
    busy = max(kit.get("load_average") or 0.0, out["load_average"])
    if out["differences"] and busy > (os.cpu_count() or 1):
        out["note"] = (f"the machine was busy (load average {kit.get('load_average')} during the kit's run, "
                                  f"{out['load_average']} during {ip.NAME}'s, on {os.cpu_count()} CPUs): client-side "
                                  "times such as TTFT and e2e move with it, and the two runs were not simultaneous")
    return out


# -- the report's table ---------------------------------------------------------------------------------------

SHOWN = ("TTFT p50", "ITL mean", "TPOT mean", "e2e p50", "output tokens/s", "goodput", "output tokens")


def table(block: dict) -> Table | None:
    """The scenario's cross-check, one row per mode ("kit / tool" per figure), or None when it was not asked."""
    results = {m: r["load_tool"] for m, r in block.get("modes", {}).items() if r.get("load_tool")}
    if not results:
        return None
    rows, bad, notes = [], set(), []
    for mode, lt in results.items():
        if lt["status"] != "ok":
            rows.append([mode] + ["–"] * len(SHOWN) + ["–", lt["status"]])
            notes.append(f"{mode}: {lt['status']}: {(lt.get('reason') or lt.get('error') or '').splitlines()[0]}")
            continue
        cells = []
        for name in SHOWN:
            f = lt["figures"][name]
            show = pct if name == "goodput" else (lambda x, d=f["digits"]: fmt(x, d))
            cells.append(f"{show(f['kit'])} / {show(f['tool'])}" + ("" if f["agree"] is not False else " ✗"))
        traced = lt.get("traced") or {}
        verdict = "agree" if not lt["differences"] else f"{len(lt['differences'])} differ"
        if lt["differences"]:
            bad.add(len(rows))
            notes += [f"{mode}: {d}" for d in lt["differences"]] + ([f"{mode}: {lt['note']}"] if lt.get("note") else [])
        rows.append([mode, *cells, f"{traced.get('envoy_rooted_traces')}/{traced.get('ok')}", verdict])
    first = next(iter(results.values()))
    tolerances = "; ".join(f"{f.name} {f.tolerance_text()}" for f in FIGURES if f.name in SHOWN)
    notes.insert(0, f"Tolerances: {tolerances}; each tool's ITL mean within {CONFIGURED_ITL_REL:.0%} of the mock's "
                    f"configured inter-token latency. traced: {ip.NAME}'s requests whose trace Envoy started.")
    return Table(f"Cross-check: the same requests sent by {first['tool']} {first['version']} (kit / {first['tool']}; "
                 "ms, tokens/s)", ("mode", *SHOWN, "traced", "verdict"), rows, notes, bad)
