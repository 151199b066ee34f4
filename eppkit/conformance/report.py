"""The conformance report, written three ways: report.json (every check, its evidence, the EPP hop), report.xml
(JUnit, one test case per check: CI systems read it) and report.html (one self-contained page)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from eppkit.conformance.checks.registry import FAIL, NOT_APPLICABLE, NOT_RUN, PASS
from eppkit.observability.html import assets, environment

TEMPLATES = Path(__file__).parent / "templates"
SYMBOL = {PASS: "✓", FAIL: "✗", NOT_APPLICABLE: "–", NOT_RUN: "·"}


def junit(report: dict) -> str:
    """JUnit XML: a fail is a <failure> with the evidence, n/a and not run are <skipped> with the reason."""
    checks = report["checks"]
    suite = ET.Element("testsuite", name=f"eppkit conformance: {report['epp']['label']}", tests=str(len(checks)),
                       failures=str(sum(c["status"] == FAIL for c in checks)),
                       skipped=str(sum(c["status"] in (NOT_APPLICABLE, NOT_RUN) for c in checks)),
                       time=str(report["wall_s"]), timestamp=report["created"])
    props = ET.SubElement(suite, "properties")
    for key, value in {**report["versions"], "schema": report["schema"], "runtime": report["runtime"]}.items():
        ET.SubElement(props, "property", name=key, value=str(value))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"conformance.{c['category'].replace(' ', '_')}",
                             name=c["id"], time=str(c["seconds"]))
        if c["status"] == FAIL:
            failure = ET.SubElement(case, "failure", message=c["message"])
            failure.text = "\n".join(c["evidence"])
        elif c["status"] in (NOT_APPLICABLE, NOT_RUN):
            ET.SubElement(case, "skipped", message=c["message"])
        if c["evidence"]:
            ET.SubElement(case, "system-out").text = "\n".join(c["evidence"])
    return ET.tostring(suite, encoding="unicode")


def text(report: dict) -> str:
    """The verdict as a terminal shows it: one line per check, the failures' messages, the EPP hop."""
    lines = [f"eppkit conformance: {report['epp']['label']} ({report['runtime']}): {report['verdict'].upper()}"]
    for c in report["checks"]:
        lines.append(f"  {SYMBOL[c['status']]} {c['status']:<8} {c['id']:<24} [{c['level']}] {c['title']}")
        if c["status"] in (FAIL, NOT_APPLICABLE, NOT_RUN):
            lines.append(f"      {c['message']}")
    lines.append("  summary: " + ", ".join(f"{n} {s}" for s, n in report["summary"].items()))
    if report.get("hop"):
        lines.append("  the EPP hop as Envoy recorded it (ms, p50 / p90 over the suite's served requests):")
        lines += [f"    {phase:<22} {v['p50']:8.2f} {v['p90']:8.2f}  (n={v['n']})" for phase, v in report["hop"].items()]
    return "\n".join(lines)


def html(report: dict) -> str:
    env = environment(TEMPLATES)
    return env.get_template("conformance.html.j2").render(report=report, symbol=SYMBOL, **assets())


def write(report: dict, out_dir: str | Path) -> dict[str, Path]:
    """report.json, report.xml and report.html into ``out_dir``; their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "junit": out / "report.xml", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["junit"].write_text(junit(report) + "\n")
    paths["html"].write_text(html(report))
    return paths
