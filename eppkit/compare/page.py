"""The compare report as one self-contained HTML page: its tables, its charts and each mode's representative trace.

Drawn with the trace pages' templates and waterfalls (:mod:`eppkit.observability.html`); its own
template is ``templates/report.html.j2`` beside this module.
"""

from __future__ import annotations

import base64
from pathlib import Path

from eppkit import modes
from eppkit.compare import report as rp
from eppkit.observability import steps as st
from eppkit.observability.html import TraceView, _value, assets, environment, trace_context

TEMPLATES = Path(__file__).parent / "templates"
REPORT_PAGE = "report.html"


def _mode(name: str):
    """A mode's registry entry; None for a name the registry does not know (a report of another version)."""
    try:
        return modes.get(name)
    except ValueError:
        return None


def _data_uri(path: Path) -> str | None:
    if not path.is_file():
        return None
    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _scenario_context(name: str, block: dict, out_dir: Path, report: dict) -> dict:
    charts = []
    for key, png in (block.get("charts") or {}).items():
        svg = out_dir / Path(png).with_suffix(".svg")
        uri = _data_uri(svg) or _data_uri(out_dir / png)
        if uri:
            charts.append({"name": key, "uri": uri, "file": png})
    modes, step_rows = rp.step_table(block)
    representatives, failed = [], []
    for mode, result in block.get("modes", {}).items():
        if result.get("status") != "ok":
            failed.append({"mode": mode, "error": (result.get("error") or "").strip(), "log": result.get("log_file")})
            continue
        rep = result.get("representative")
        if not rep or not rep.get("file") or not (out_dir / rep["file"]).is_file():
            continue
        links = [("trace file", rep["file"])] + ([("static waterfall", rep["waterfall"])] if rep.get("waterfall") else [])
        view = TraceView(rp.load_trace(out_dir / rep["file"]),
                         title=f"{mode} — trace {rep['trace_id']}, e2e {rep.get('e2e_ms', 0):.1f} ms", links=links,
                         note="the request nearest this mode's median e2e", mode=_mode(mode))
        representatives.append({"mode": mode, **trace_context(view)})
    return {
        "name": name, "description": block.get("description", ""), "workload": block.get("workload", {}),
        "summary_columns": rp.SUMMARY_COLUMNS, "summary_rows": rp.summary_rows(block),
        "step_modes": modes, "step_rows": step_rows, "extra_tables": rp.extra_tables(report, block), "charts": charts,
        "hop_modes": rp.hop_table(block)[0], "hop_rows": rp.hop_table(block)[1],
        "representatives": representatives, "failed": failed,
    }


def report_page(report: dict, out_dir: str | Path) -> str:
    """The compare report as one page: its tables, its charts and each mode's representative trace."""
    out_dir = Path(out_dir)
    config = [(k, _value(v)) for k, v in (report.get("config") or {}).items()]
    host = report.get("host") or {}
    run = {"created": report.get("created", ""), "wall_s": report.get("wall_s"),
           "machine": ", ".join(str(x) for x in (f"{host['cpus']} CPUs" if host.get("cpus") else "", host.get("platform"))
                                if x)}
    return environment(TEMPLATES).get_template("report.html.j2").render(
        run=run, config=config, baseline=report.get("baseline"),
        scenarios=[_scenario_context(n, b, out_dir, report) for n, b in report.get("scenarios", {}).items()],
        steps=st.STEPS, **assets())


def write_report(report: dict, out_dir: str | Path) -> Path:
    """``report.html`` in the report folder (after report.json, charts and traces are written)."""
    path = Path(out_dir) / REPORT_PAGE
    path.write_text(report_page(report, out_dir))
    return path


