"""Which UI shows a Jaeger's traces: Zipkin's, fed from it, or Jaeger's own when it serves one."""

import pytest

from eppkit.ui import live as live_ui

pytestmark = pytest.mark.unit

PLACEHOLDER = ("<!DOCTYPE html><title>Test Page</title><h1>This is not the Jaeger UI you are looking for!</h1>"
               "<p>This is a placeholder for the Jaeger UI home page.</p>")  # what a build without the UI serves
JAEGER_UI = '<!doctype html><title>Jaeger UI</title><body><div id="jaeger-ui-root"></div></body>'


class Page:
    def __init__(self, text, ok=True):
        self.text, self.ok = text, ok


class FakeZipkin:
    ui_url = "http://127.0.0.1:9411/zipkin/"
    url = "http://127.0.0.1:9411"

    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append("start")

    def wait_ready(self):
        self.calls.append("ready")

    def stop(self):
        self.calls.append("stop")

    def trace_url(self, trace_id):
        return f"{self.ui_url}traces/{trace_id}"


class FakeFeed:
    started = []

    def __init__(self, jaeger, zipkin):
        self.jaeger, self.zipkin, self.stopped = jaeger, zipkin, False

    def start(self):
        FakeFeed.started.append(self)
        return self

    def stop(self):
        self.stopped = True


@pytest.fixture
def pages(monkeypatch):
    served = {}
    monkeypatch.setattr(live_ui.requests, "get", lambda url, timeout: served[url])
    monkeypatch.setattr(live_ui, "TraceFeed", FakeFeed)
    FakeFeed.started = []
    return served


def test_a_jaeger_without_its_ui_is_shown_in_zipkin(tmp_path, pages):
    pages["http://127.0.0.1:16686/"] = Page(PLACEHOLDER)
    zipkin = FakeZipkin()
    ui = live_ui.LiveUI(tmp_path, zipkin=zipkin).start()
    assert ui.attach("http://127.0.0.1:16686") == zipkin.ui_url
    assert zipkin.calls == ["start", "ready"]
    feed = FakeFeed.started[0]
    assert (feed.jaeger, feed.zipkin) == ("http://127.0.0.1:16686", zipkin.url)
    assert ui.trace_url("ab" * 16) == zipkin.trace_url("ab" * 16)
    ui.stop()
    assert feed.stopped and zipkin.calls[-1] == "stop"


def test_a_jaeger_with_its_own_ui_needs_no_zipkin(tmp_path, pages):
    pages["http://127.0.0.1:16686/"] = Page(JAEGER_UI)
    zipkin = FakeZipkin()
    with live_ui.LiveUI(tmp_path, zipkin=zipkin) as ui:
        assert ui.attach("http://127.0.0.1:16686") == "http://127.0.0.1:16686/"
        assert zipkin.calls == ["start", "stop"], "Zipkin is stopped at once"
        assert ui.trace_url("ab" * 16) == f"http://127.0.0.1:16686/trace/{'ab' * 16}"
    assert zipkin.calls == ["start", "stop"] and not FakeFeed.started


def test_two_jaegers_one_with_a_ui_each_link_to_their_own(tmp_path, pages):
    pages["http://a/"] = Page(PLACEHOLDER)
    pages["http://b/"] = Page(JAEGER_UI)
    zipkin = FakeZipkin()
    with live_ui.LiveUI(tmp_path, zipkin=zipkin) as ui:
        ui.attach("http://a")
        ui.attach("http://b")
        assert ui.trace_url("t", "http://a") == zipkin.trace_url("t")
        assert ui.trace_url("t", "http://b") == "http://b/trace/t"
    assert zipkin.calls == ["start", "ready", "stop"]


def test_not_enabled_is_none():
    with live_ui.optional(False) as ui:
        assert ui is None
