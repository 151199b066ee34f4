"""The conformance report, written three ways: report.json (every check, its evidence, the EPP hop), report.xml
(JUnit, one test case per check: CI systems read it) and report.html (one self-contained page)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from eppkit.conformance.results import FAIL, NOT_APPLICABLE, NOT_RUN, PASS, SHOULD
from eppkit.conformance.suite import CONFORMS, FAILS, INCOMPLETE, NOT_LOADED, PARTIAL, WARNINGS, base_verdict
from eppkit.observability.html import assets, environment

TEMPLATES = Path(__file__).parent / "templates"
SYMBOL = {PASS: "✓", FAIL: "✗", NOT_APPLICABLE: "–", NOT_RUN: "·"}
WORST_FIRST = (NOT_LOADED, FAILS, INCOMPLETE, PARTIAL, WARNINGS, CONFORMS)  # the verdicts, worst first


def subject(report: dict) -> dict:
    """What was judged: an EPP or a plugin (``kind``), its label and mode (a report from before ``subject``: its
    EPP)."""
    return report.get("subject") or {"kind": "epp", **report["epp"]}


def _title(report: dict) -> str:
    """The subject as a report's first line names it."""
    judged = subject(report)
    return f"the plugin {judged['label']}" if judged["kind"] == "plugin" else judged["label"]


def junit(report: dict) -> str:
    """JUnit XML: a fail is a <failure> with the evidence (a failed *should* too: CI systems show it), n/a and not
    run are <skipped> with the reason; in a matrix report, one test case per check and Envoy version."""
    cases = [(c, f" [envoy {v}]") for v, r in report["matrix"].items() for c in r["checks"]] if "matrix" in report \
        else [(c, "") for c in report["checks"]]
    suite = ET.Element("testsuite", name=f"eppkit conformance: {_title(report)}", tests=str(len(cases)),
                       failures=str(sum(c["status"] == FAIL for c, _ in cases)),
                       skipped=str(sum(c["status"] in (NOT_APPLICABLE, NOT_RUN) for c, _ in cases)),
                       time=str(report["wall_s"]), timestamp=report["created"])
    props = ET.SubElement(suite, "properties")
    for key, value in {**report["versions"], "schema": report["schema"], "runtime": report["runtime"],
                       "verdict": report["verdict"]}.items():
        ET.SubElement(props, "property", name=key, value=str(value))
    for c, where in cases:
        case = ET.SubElement(suite, "testcase", classname=f"conformance.{c['category'].replace(' ', '_')}",
                             name=c["id"] + where, time=str(c["seconds"]))
        if c["status"] == FAIL:
            failure = ET.SubElement(case, "failure", message=f"[{c['level']}] {c['message']}")
            failure.text = "\n".join(c["evidence"])
        elif c["status"] in (NOT_APPLICABLE, NOT_RUN):
            ET.SubElement(case, "skipped", message=c["message"])
        if c["evidence"]:
            ET.SubElement(case, "system-out").text = "\n".join(c["evidence"])
    return ET.tostring(suite, encoding="unicode")


def text(report: dict) -> str:
    """The verdict as a terminal shows it: one line per check (a column per Envoy version in a matrix), the
    failures' messages, the warnings, the EPP hop."""
    if "matrix" in report:
        return _matrix_text(report)
    lines = [f"eppkit conformance: {_title(report)} ({report['runtime']}): {report['verdict'].upper()}"]
    if subject(report)["kind"] == "plugin":
        lines.append(f"  the floor: {subject(report)['floor']}; {report['floor']['rule']}")
    for c in report["checks"]:
        lines.append(f"  {SYMBOL[c['status']]} {c['status']:<8} {c['id']:<24} [{c['level']}] {c['title']}")
        if c["status"] in (FAIL, NOT_APPLICABLE, NOT_RUN):
            lines.append(f"      {c['message']}")
        if c["status"] == FAIL:
            lines += [f"      | {line}" for line in c["evidence"] if _quoted(line)][:12]
    lines.append("  summary: " + ", ".join(f"{n} {s}" for s, n in report["summary"].items()))
    warnings = [c["id"] for c in report["checks"] if c["status"] == FAIL and c["level"] == SHOULD]
    if warnings and not report.get("strict"):
        lines.append(f"  warnings (should checks that failed; --strict fails on them): {', '.join(warnings)}")
    if report.get("hop"):
        lines.append("  the EPP hop as Envoy recorded it (ms, p50 / p90 over the suite's served requests):")
        lines += [f"    {phase:<22} {v['p50']:8.2f} {v['p90']:8.2f}  (n={v['n']})"
                  for phase, v in report["hop"].items()]
    return "\n".join(lines)


def _quoted(line: str) -> bool:
    """Evidence a terminal shows under a failure: Envoy's and the EPP's own words, and where the logs are
    (Harness.log_evidence)."""
    return line.startswith(("Envoy logged (", "the EPP logged (", "  ", "run folder: "))


def matrix(reports: list[dict]) -> dict:
    """One report of the same EPP judged on several Envoy versions: each version's report, the worst verdict, and
    per check its status on each version."""
    by_version = {r["versions"].get("envoy", "?"): r for r in reports}
    # The verdict of the versions the filters load in (each one that refused them says so); none: does not load.
    loaded = [r["verdict"] for r in reports if r["verdict"] != NOT_LOADED]
    worst = min(loaded, key=_rank) if loaded else NOT_LOADED
    first = reports[0]
    return {
        "schema": first["schema"], "created": first["created"], "subject": subject(first),
        **{k: first[k] for k in ("epp", "floor") if k in first}, "runtime": first["runtime"],
        "versions": {k: v for k, v in first["versions"].items() if k != "envoy"},
        "envoy_versions": list(by_version),
        "verdict": worst,
        "verdicts": {v: r["verdict"] for v, r in by_version.items()},
        "summary": {v: r["summary"] for v, r in by_version.items()},
        "wall_s": round(sum(r["wall_s"] for r in reports), 1),
        "matrix": by_version,
        "checks": [{"id": c["id"], "title": c["title"], "level": c["level"], "category": c["category"],
                    "status": {v: next(x["status"] for x in r["checks"] if x["id"] == c["id"])
                               for v, r in by_version.items()}}
                   for c in first["checks"]],
    }


def _rank(verdict: str) -> tuple[int, int]:
    """Worst first: by the verdict, and a verdict naming *musts* left out as asked before the same one without."""
    return WORST_FIRST.index(base_verdict(verdict)), int(verdict == base_verdict(verdict))


def _matrix_text(report: dict) -> str:
    versions = report["envoy_versions"]
    lines = [(f"eppkit conformance: {_title(report)} ({report['runtime']}), Envoy {', '.join(versions)}: "
              f"{report['verdict'].upper()}"),
             "  " + " " * 34 + "".join(f"{v:>14}" for v in versions)]
    for c in report["checks"]:
        lines.append(f"  {c['id']:<24} [{c['level']:<6}]" + "".join(f"{c['status'][v]:>14}" for v in versions))
    lines.append("  verdicts: " + "; ".join(f"{v} {report['verdicts'][v]}" for v in versions))
    for v in versions:
        if report["verdicts"][v] == NOT_LOADED:
            reason = report["matrix"][v]["checks"][0]["message"] if report["matrix"][v]["checks"] else ""
            lines.append(f"  [{v}] {reason.splitlines()[0] if reason else NOT_LOADED}")
        for c in report["matrix"][v]["checks"]:
            if c["status"] == FAIL:
                lines.append(f"  [{v}] {c['id']}: {c['message']}")
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
