"""A bounded load test per mode: every request accounted for.

Per mode, after a warm-up at the same concurrency: N streaming chat requests at concurrency C
through :class:`testbed.workload.Driver` (the driver ``eppkit compare`` uses), every 100th
carrying ``x-mock-failure: 500``. Then:

- no request lost: every one got an HTTP answer, and the driver dispatched them all;
- no error beyond the injected ones, and every injected one failed (500);
- every request has a complete trace in Jaeger (a served one: every step of its mode; an
  injected failure: up to the mock's ``llm_request``);
- every service's resident memory is flat across the run (start and end printed per service).

Sizes (``EPPKIT_LOAD_REQUESTS`` / ``EPPKIT_LOAD_CONCURRENCY`` override both): local runtime
2,000 requests at concurrency 100 per mode; docker runtime a smaller bounded run (see
``SIZES``; docs/reliability.md has the measured times that chose them). The run stops by
itself: nothing is dispatched after ``MAX_DISPATCH_S``, each request has a timeout, trace
read-back has a deadline.
"""

import json
import os

import pytest

from _reliability import MODES, run_load, topology

pytestmark = [pytest.mark.e2e, pytest.mark.load]

SIZES = {"local": (2000, 100), "docker": (1000, 50)}  # runtime -> (requests, concurrency)
INJECT_EVERY = 100
MAX_DISPATCH_S = 300.0
MIB = 1 << 20
# "Flat": the end of the run is within this of its start (measured after a warm-up, so arenas,
# connection pools and caches have grown already). Python's allocator keeps freed pages for reuse,
# so some drift is normal; a leak of one object per request would show as tens of MiB.
RSS_SLACK = (0.15, 16 * MIB)  # relative, absolute: end <= start * (1 + rel) + abs


def sizes(runtime: str) -> tuple[int, int]:
    requests, concurrency = SIZES[runtime]
    return (int(os.environ.get("EPPKIT_LOAD_REQUESTS", requests)),
            int(os.environ.get("EPPKIT_LOAD_CONCURRENCY", concurrency)))


@pytest.mark.parametrize("mode", MODES)
def test_bounded_load_loses_no_request_no_trace_and_no_memory(testbed_factory, runtime, mode, record_property, capsys):
    n, concurrency = sizes(runtime)
    bed = testbed_factory(topology(mode, ttft_ms=20, itl_ms=2))
    result = run_load(bed, requests=n, concurrency=concurrency, max_duration_s=MAX_DISPATCH_S,
                      inject_every=INJECT_EVERY, warmup=2 * concurrency)
    summary = result.summary()
    with capsys.disabled():  # the figures belong in the CI log, pass or fail
        print("\n" + summary)
    figures = {"mode": mode, "runtime": runtime, "requests": n, "concurrency": concurrency,
               "wall_s": round(result.wall_s, 2), "lost": result.lost, "ok": result.ok,
               "injected": len(result.injected), "errors": len(result.errors), "unexpected": len(result.unexpected),
               "incomplete_traces": len(result.incomplete), "p50_ms": round(result.pct(50), 1),
               "p99_ms": round(result.pct(99), 1), "rss_start": result.rss_start, "rss_end": result.rss_end,
               "rss_max": result.rss_max, "trace_wait_s": round(result.trace_wait_s, 1)}
    (bed.run_dir / "load.json").write_text(json.dumps(figures, indent=2))
    record_property("load", json.dumps(figures))

    assert result.stopped is None, f"{result.stopped}: the run did not dispatch every request ({summary})"
    assert result.lost == 0, f"{result.lost} requests got no answer: {summary}"
    assert not result.unexpected, f"errors beyond the injected ones: {dict(list(result.unexpected.items())[:20])}"
    assert not result.incomplete, f"incomplete traces: {dict(list(result.incomplete.items())[:10])}"
    grew = {name: (start / MIB, result.rss_end.get(name, 0) / MIB) for name, start in result.rss_start.items()
            if result.rss_end.get(name, 0) > start * (1 + RSS_SLACK[0]) + RSS_SLACK[1]}
    assert not grew, f"memory grew across the run (MiB start, end): {grew}"
    assert set(result.rss_start) >= {"envoy", "vllm-0", "vllm-1"}, result.rss_start
