"""Zipkin's server as the live UI runs it: on loopback only, a converted trace comes back whole from its
API and renders in its UI (headless Chromium), and stopping it leaves nothing running.

Needs Java 17+ and the jar (`eppkit bootstrap --ui`); with CI=true their absence fails the test.
"""

import time
from pathlib import Path

import pytest
import requests
from eppkit.observability import zipkin_spans

from eppkit.compare import report as rp
from eppkit.pytest_plugin.state import require
from eppkit.ui import zipkin
from tests.support import chromium as _chromium

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "unit" / "data" / "traces"


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                out.append((address, int(port, 16)))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    java, why = zipkin.find_java()
    require(java is not None, why)
    require(zipkin.find_jar() is not None, "Zipkin's server jar is not cached. Run `eppkit bootstrap --ui`.")
    with zipkin.ZipkinServer(tmp_path_factory.mktemp("zipkin")) as server:
        yield server


def test_it_listens_on_loopback_only(server):
    ports = listening_ports(server.process.pid)
    assert ports == [("0100007F", server.port)], f"listening on {ports}; want 127.0.0.1:{server.port} only"


def test_a_converted_trace_comes_back_whole_and_renders_in_its_ui(server, tmp_path):
    trace = rp.load_trace(DATA / "multimodal-sidecar.json")
    resp = requests.post(f"{server.url}/api/v2/spans", json=zipkin_spans.spans(trace), timeout=10)
    assert resp.status_code == 202, resp.text
    deadline, got = time.monotonic() + 10, []
    while time.monotonic() < deadline:
        resp = requests.get(f"{server.url}/zipkin/api/v2/trace/{trace.trace_id}", timeout=5)
        got = resp.json() if resp.status_code == 200 else []
        if len(got) == len(trace.spans):
            break
        time.sleep(0.2)
    assert sorted(s["id"] for s in got) == sorted(s.span_id for s in trace.spans)
    instances = {s["tags"].get("service.instance.id") for s in got if s["localEndpoint"]["serviceName"] == "encoder"}
    assert len(instances) == 2, "the two encoders stay apart"

    dom = _chromium.dump_dom(server.trace_url(trace.trace_id))
    for name in ("frontend.route", "encoder.encode", "pd.prefill"):
        assert name in dom, f"Zipkin's UI does not show {name}"
    _chromium.screenshot(server.trace_url(trace.trace_id), tmp_path / "zipkin.png")


def test_stopping_it_is_immediate_and_complete(tmp_path):
    require(zipkin.find_jar() is not None, "Zipkin's server jar is not cached. Run `eppkit bootstrap --ui`.")
    server = zipkin.ZipkinServer(tmp_path).start()
    pid = server.process.pid
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 1.0
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
