"""A live trace UI for running Jaegers: Zipkin's UI fed from them, or Jaeger's own UI when it has one.

``eppkit up --ui`` and the pytest plugin's ``--eppkit-ui`` use it::

    ui = LiveUI(run_dir).start()      # spawns Zipkin's JVM; start the testbed meanwhile
                                      # (or: with optional(True) as ui: ...)
    ui.attach(jaeger_api_url)         # waits for Zipkin, then copies that Jaeger's traces into it
    print(ui.trace_url(trace_id))
    ui.stop()                         # the feeds, then Zipkin (killed: its store is in memory)

A Jaeger that serves its UI itself (the official ``jaegertracing/jaeger`` image, which the docker
runtime uses when the engine already holds it) needs no Zipkin: :meth:`attach` then links to
Jaeger's UI and, when no other Jaeger needs Zipkin, stops it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, ContextManager

import requests

from eppkit.ui import zipkin
from eppkit.ui.feed import TraceFeed
from eppkit.ui.zipkin import ZipkinServer


def jaeger_ui_url(jaeger_api_url: str) -> str | None:
    """Jaeger's own UI, when this Jaeger serves one (a build without the UI serves a placeholder page)."""
    try:
        resp = requests.get(jaeger_api_url.rstrip("/") + "/", timeout=3)
    except requests.RequestException:
        return None
    return jaeger_api_url.rstrip("/") + "/" if resp.ok and "jaeger-ui-root" in resp.text else None


class LiveUI:
    def __init__(self, run_dir: Path, *, zipkin: ZipkinServer | None = None):
        self.zipkin = zipkin or ZipkinServer(run_dir)
        self.feeds: list[TraceFeed] = []
        self._ui_of: dict[str, str] = {}  # Jaeger API URL -> the UI that shows its traces
        self._zipkin_running = False

    def start(self) -> "LiveUI":
        """Spawn Zipkin's server; it gets ready (about 3 s) while the caller starts its testbed."""
        self.zipkin.start()
        self._zipkin_running = True
        return self

    def attach(self, jaeger_api_url: str) -> str:
        """Show this Jaeger's traces; returns the UI's URL."""
        own = jaeger_ui_url(jaeger_api_url)
        if own is not None:
            if not self.feeds:
                self._stop_zipkin()  # nobody needs it (yet)
        else:
            if not self._zipkin_running:
                self.start()
            self.zipkin.wait_ready()
            self.feeds.append(TraceFeed(jaeger_api_url, self.zipkin.url).start())
        self._ui_of[jaeger_api_url] = own or self.zipkin.ui_url
        return self._ui_of[jaeger_api_url]

    @property
    def url(self) -> str:
        return next(iter(self._ui_of.values()), self.zipkin.ui_url)

    def trace_url(self, trace_id: str, jaeger_api_url: str | None = None) -> str:
        """The page of one trace, in the UI that shows ``jaeger_api_url``'s traces (default: the first)."""
        ui = self._ui_of.get(jaeger_api_url or "", self.url)
        return self.zipkin.trace_url(trace_id) if ui == self.zipkin.ui_url else f"{ui}trace/{trace_id}"

    def stop(self) -> None:
        for feed in self.feeds:
            feed.stop()
        self.feeds.clear()
        self._stop_zipkin()

    def _stop_zipkin(self) -> None:
        if self._zipkin_running:
            self.zipkin.stop()
            self._zipkin_running = False

    def __enter__(self) -> "LiveUI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def optional(enabled: bool, run_dir: Path | None = None,
             progress: Callable[[str], None] = print) -> ContextManager["LiveUI | None"]:
    """A started :class:`LiveUI` in a ``with`` (fetching Zipkin's jar first, once), or None when not enabled."""
    if not enabled:
        return contextlib.nullcontext(None)
    if zipkin.find_jar() is None:  # first use: fetch it now, with progress, rather than fail
        zipkin.fetch(progress)
    if run_dir is None:
        from eppkit.runtimes.testbed import new_run_dir

        run_dir = new_run_dir("trace-ui")
    return LiveUI(run_dir)
