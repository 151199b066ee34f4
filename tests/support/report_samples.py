"""Shared by the report and page tests (unit and Chromium): sample reports, saved traces, a page parser."""

import shutil
from html.parser import HTMLParser
from pathlib import Path

from eppkit.compare import report as rp

DATA = Path(__file__).parents[1] / "unit" / "data" / "traces"  # traces recorded from real testbeds


def sample(i, e2e, *, gateway=0.2, decision=None, roundtrip=None, error=None, complete=True, missing=(), tokens=10):
    steps = {"e2e": e2e, "gateway": gateway, "queue": 0.1, "prefill": 100.0, "decode": e2e - 110}
    if decision is not None:
        steps.update(decision=decision, roundtrip=roundtrip)
    return {"index": i, "trace_id": f"{i:032x}", "ok": error is None, "error": error, "tokens": tokens,
            "steps": steps if error is None else {}, "complete": complete if error is None else None,
            "missing": list(missing)}


def mode_result(samples, wall_s=2.0):
    return {"status": "ok", **rp.summarize_mode(samples, planned=len(samples), wall_s=wall_s), "samples": samples}


def report_with(modes: dict, scenario="chat") -> dict:
    rp.add_overheads(modes)
    return {"schema": rp.SCHEMA, "created": "now", "config": {"modes": list(modes)}, "host": {"cpus": 2},
            "scenarios": {scenario: {"description": "short chat", "workload": {"requests": 4}, "modes": modes}}}


class Page(HTMLParser):
    """The spans (in page order), event markers, every URL a page refers to, and the <html> element's attributes."""

    def __init__(self, text: str):
        super().__init__()
        self.spans: list[dict] = []  # the attributes of each <details class="span">
        self.events = 0
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.root: dict = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "html":
            self.root = attrs
        if tag == "details" and "span" in (attrs.get("class") or "").split():
            self.spans.append(attrs)
        if tag == "path" and attrs.get("class") == "event":
            self.events += 1
        for key in ("src", "href"):
            if attrs.get(key):
                self.urls.append(attrs[key])


def report_folder(tmp_path):
    modes = {"direct": mode_result([sample(i, 250 + i) for i in range(5)]),
             "ext_proc": mode_result([sample(i, 255 + i, gateway=4.0, decision=0.2, roundtrip=3.0) for i in range(5)]),
             "sidecar": {"status": "failed", "error": "RuntimeError: <boom>", "log_file": "logs/chat-sidecar.log"}}
    report = report_with(modes)
    (tmp_path / "traces").mkdir()
    shutil.copy(DATA / "chat-ext_proc.json", tmp_path / "traces/chat-ext_proc-x.json")
    modes["ext_proc"]["representative"] = {"trace_id": "x", "e2e_ms": 244.1, "file": "traces/chat-ext_proc-x.json"}
    report["baseline"] = {"file": "old.json", "threshold": 0.25, "floor_ms": 2.0, "regressions": [
        {"scenario": "chat", "mode": "ext_proc", "metric": "e2e.p50_ms", "baseline": 200, "current": 260,
         "change": 0.3, "rule": "> +25%"}]}
    return report


def many_modes(concurrencies=(None,), body_paths=("streamed",)) -> dict:
    """A report as a default run's scenario gives it: each of the kit's modes beside its floor (nine runs), every
    step, TTFT and the EPP hop filled in; with ``concurrencies`` a sweep's (each run once per step, ``<run>@c<n>``)
    and with ``body_paths`` the ext_proc modes once per path: the mode names the charts and tables must keep apart."""
    from eppkit import modes as registry
    from eppkit.compare import bodypaths, floors, sweep

    runs: dict = {}
    for n, mode in enumerate(registry.kit_names()):
        for path in body_paths if bodypaths.applies(mode) else (bodypaths.DEFAULT,):
            for c in concurrencies:
                key = sweep.key(bodypaths.key(mode, path), c)
                floor = floors.floor_of(mode)
                runs[key] = _filled(250 + 3 * n + (c or 1), floor=floor and sweep.key(bodypaths.key(floor, path), c))
                if floor is not None:
                    runs.setdefault(sweep.key(bodypaths.key(floor, path), c), _filled(250 + n + (c or 1)))
    return report_with(runs)


def _filled(e2e: float, floor: str | None = None) -> dict:
    samples = [sample(i, e2e + i, gateway=2.0 + i / 10, decision=0.3, roundtrip=1.2) for i in range(6)]
    for s in samples:
        s["steps"]["ttft"] = 100.0 + s["index"]
        s["hop"] = {"hold": 1.5 + s["index"] / 10, "epp_decision": 0.8, "upstream": 110.0}
    result = mode_result(samples)
    return {**result, "floor": floor} if floor else result
