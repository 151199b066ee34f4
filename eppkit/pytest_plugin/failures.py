"""A failing test tells its story: every component's log tail, an HTML page of its requests' traces, and
(``--eppkit-keep-on-failure``) its testbed left running until Ctrl-C."""

from __future__ import annotations

import re
import signal
import time

import pytest

from eppkit.pytest_plugin.state import BEDS, TRACE_MARKS, UI

MAX_FAILED_TRACES = 10  # the last requests of a failed test drawn on its page


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed:
        for bed in item.stash.get(BEDS, []):
            try:
                tails = bed.log_tails(80)
            except Exception as exc:  # a testbed that never got far enough to have logs
                tails = f"(no logs: {exc})"
            report.sections.append((f"eppkit testbed logs ({bed.run_dir})", tails))
        pages = _failed_test_traces(item)
        if pages:
            report.sections.append(("eppkit traces (HTML, open in a browser)", pages))
    return report


def _failed_test_traces(item: pytest.Item) -> str:
    """Write the last requests' traces of a failed test as one page next to each testbed's logs; say where."""
    from eppkit.observability import html

    ui = item.config.stash.get(UI, None)
    lines = []
    for bed in item.stash.get(BEDS, []):
        try:
            sent = bed.trace_ids()[item.stash.get(TRACE_MARKS, {}).get(id(bed), 0):]
            if not sent:
                continue
            try:  # flushes the clients' spans and waits for the last request's to settle
                bed.wait_for_trace(sent[-1], (), timeout_s=3)
            except AssertionError:
                pass
            traces = [t for t in map(bed.jaeger.get_trace, sent[-MAX_FAILED_TRACES:]) if t is not None]
            live = (lambda t: [("live UI", ui.trace_url(t.trace_id, bed.jaeger_api_url))]) if ui else None
            name = re.sub(r"[^\w.-]+", "_", item.name)[:120]
            page = html.write_trace_page(
                bed.run_dir / f"failed-{name}.html",
                html.trace_views(traces, live), title=f"{item.nodeid} failed",
                intro=f"The traces of its last {min(len(sent), MAX_FAILED_TRACES)} of {len(sent)} request(s) to this "
                      f"testbed ({bed.topology.mode}, {bed.topology.flow}, {bed.runtime}); Jaeger held "
                      f"{len(traces)}. Logs: {bed.run_dir}")
        except Exception as exc:  # the report must not fail because a trace could not be read
            lines.append(f"(no trace page for {bed.run_dir}: {type(exc).__name__}: {exc})")
            continue
        lines.append(str(page))
        lines += [f"  live: {ui.trace_url(t.trace_id, bed.jaeger_api_url)}" for t in traces] if ui else []
    return "\n".join(lines)


def failed(item: pytest.Item) -> bool:
    return any(getattr(item, f"rep_{w}", None) is not None and getattr(item, f"rep_{w}").failed
               for w in ("setup", "call"))


def keep_until_interrupted(config: pytest.Config, item: pytest.Item, beds: list) -> None:
    """--eppkit-keep-on-failure: leave the failed test's testbeds up until Ctrl-C."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n\n{item.nodeid} failed; its testbed is still running (--eppkit-keep-on-failure):")
        for bed in beds:
            print(bed.describe())
        print("Ctrl-C stops it and ends the session.", flush=True)
        # Ctrl-C, even where the session was started with SIGINT ignored (a child of a process that ignores it,
        # as pytest-xdist's workers do, inherits that; Python then installs no handler of its own).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGINT, previous)
    pytest.exit("stopped after the first failure (--eppkit-keep-on-failure)", returncode=1)


