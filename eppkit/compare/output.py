"""Everything a comparison writes into its report folder: report.json, the charts, summary.md, report.html."""

from __future__ import annotations

import json
from pathlib import Path

from eppkit.compare import charts as drawn
from eppkit.compare import page
from eppkit.compare import report as rp


def write(report: dict, out_dir: str | Path, *, charts: bool = True) -> dict[str, Path]:
    """Write report.json, charts, summary.md and report.html into ``out_dir``; returns the main paths.

    Waterfalls are drawn from the representative traces already saved under ``traces/``.
    Chart paths and waterfall links are recorded in the report (relative to ``out_dir``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if charts:
        for scenario, block in report.get("scenarios", {}).items():
            ok = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok"]
            if not ok:
                continue
            block["charts"] = {}
            stem = out / f"latency-{scenario}"
            drawn.latency_chart(block, stem, f"{scenario}: latency per mode ({block.get('workload', {}).get('requests')} requests each)")
            block["charts"]["latency"] = stem.name + ".png"
            stem = out / f"steps-{scenario}"
            drawn.steps_chart(block, stem, f"{scenario}: where the time goes, per mode")
            block["charts"]["steps"] = stem.name + ".png"
            stem = out / f"concurrency-{scenario}"
            if drawn.concurrency_chart(block, stem, f"{scenario}: per concurrency, p50 per run"):
                block["charts"]["concurrency"] = stem.name + ".png"
            stem = out / f"prompt-sizes-{scenario}"
            if drawn.prompt_sizes_chart(block, stem, f"{scenario}: per prompt size, p50 per mode"):
                block["charts"]["prompt sizes"] = stem.name + ".png"
            for mode in ok:
                rep = block["modes"][mode].get("representative")
                if not rep or not rep.get("file") or not (out / rep["file"]).is_file():
                    continue
                trace = rp.load_trace(out / rep["file"])
                stem = out / f"waterfall-{scenario}-{mode}"
                drawn.waterfall_chart(trace, stem, f"{mode} · {scenario} · trace {rep['trace_id']} · "
                                             f"e2e {rep.get('e2e_ms', 0):.1f} ms (the request nearest the median)")
                rep["waterfall"] = stem.name + ".png"
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=1, sort_keys=False, default=rp.json_default) + "\n")
    md_path = out / "summary.md"
    md_path.write_text(rp.render_markdown(report))
    return {"json": json_path, "markdown": md_path, "html": page.write_report(report, out), "dir": out}
