"""A failing test's traces, as its author meets them: the failure report names an HTML page of the test's
requests (written next to its testbed's logs) and, with --eppkit-ui, links each trace in the live UI.

Runs a whole pytest session with the kit's plugin over one deliberately failing test, on the runtime
under test, then opens the page it names in headless Chromium.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eppkit.pytest_plugin.state import SESSION_TAG, require
from eppkit.ui import zipkin
from tests.support import chromium as _chromium

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]

INNER = """
    import json, time
    import requests
    from eppkit.topology import Topology

    def test_fails_after_two_requests(eppkit_testbed_factory, eppkit_ui):
        bed = eppkit_testbed_factory(Topology(mode="ext_proc"))
        client = bed.client()
        results = [client.chat({{"model": "mock-llm", "max_tokens": 3, "messages": [{{"role": "user", "content": "hi"}}]}})
                   for _ in range(2)]
        traces = [bed.wait_for_trace(r) for r in results]
        seen = {{}}
        for trace in traces:  # what the live UI shows of each trace, a few seconds at most after Jaeger has it
            want, got = {{s.span_id for s in trace.spans}}, set()
            deadline = time.monotonic() + 5
            while eppkit_ui is not None and not want <= got and time.monotonic() < deadline:
                resp = requests.get(f"{{eppkit_ui.zipkin.url}}/zipkin/api/v2/trace/{{trace.trace_id}}")
                got = {{s["id"] for s in resp.json()}} if resp.status_code == 200 else set()
                time.sleep(0.1)
            seen[trace.trace_id] = {{"jaeger": sorted(want), "ui": sorted(got)}}
        open({out!r}, "w").write(json.dumps(seen))
        assert results[0].status == 599, "deliberately failing"
"""


def test_a_failed_test_names_its_trace_page_and_links_the_live_ui(tmp_path, eppkit_runtime):
    require(zipkin.find_jar() is not None, "Zipkin's server jar is not cached. Run `eppkit bootstrap --ui`.")
    out = tmp_path / "seen.json"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER.format(out=str(out))))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
         "--eppkit-runtime", eppkit_runtime, "--eppkit-ui", str(tmp_path / "test_inner.py")],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
        # A session of its own: its leak check must not take this session's Jaeger for one of its leaks.
        env={**{k: v for k, v in os.environ.items() if k != SESSION_TAG}, "EPPKIT_RUNS": str(tmp_path / "runs")})
    report = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed" in report and "deliberately failing" in report, report
    assert "LEAK" not in report, report
    assert re.search(r"eppkit: the \w+ Jaeger's traces, live: http://127\.0\.0\.1:\d+/zipkin/", report), report

    seen = json.loads(out.read_text())
    for trace_id, spans in seen.items():
        assert spans["jaeger"] and set(spans["jaeger"]) <= set(spans["ui"]), f"the live UI lacks spans of {trace_id}"
        assert re.search(rf"live: http://127\.0\.0\.1:\d+/zipkin/traces/{trace_id}", report), report

    section = report.split("eppkit traces (HTML, open in a browser)", 1)[1]
    page = Path(re.search(r"^(/\S+/failed-test_fails_after_two_requests[^/\s]*\.html)$", section, re.M).group(1))
    assert page.parent.parent == tmp_path / "runs", "next to the testbed's logs"
    assert (page.parent / "envoy.log").is_file()
    dom = _chromium.dump_dom(page.as_uri())
    drawn = re.findall(r'<details class="span[^"]*" data-span-id="([0-9a-f]+)"', dom)
    assert sorted(drawn) == sorted(i for spans in seen.values() for i in spans["jaeger"]), \
        "the page draws every span of both requests' traces"
    _chromium.screenshot(page.as_uri(), tmp_path / "failed-test.png")
