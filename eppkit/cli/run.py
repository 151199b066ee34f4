"""`eppkit run`: start a testbed, send one traced request, print its waterfall, save its trace, stop."""

from __future__ import annotations

import json
import sys
import time

from eppkit import options
from eppkit.modes import Setup
from eppkit.runtimes import create


def main(args, setup: Setup) -> int:
    """``setup``: the testbed's topology as the command line describes it, checked (eppkit.cli.main)."""
    from eppkit.core.polling import PollTimeout
    from eppkit.observability import html, waterfall
    from eppkit.observability.jaeger_client import TraceIncomplete

    content: object = args.prompt
    if args.images:
        content = [{"type": "text", "text": args.prompt}] + [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{'QUJD' * (16 + i)}"}}
            for i in range(args.images)]
    runtime = options.runtime(args)
    t0 = time.monotonic()
    with create(setup, runtime=runtime, cluster=args.cluster) as bed:
        backend = bed.topology.backend
        print(f"testbed up in {time.monotonic() - t0:.1f}s (mode={bed.topology.mode}, runtime={runtime}, "
              f"envoy {bed.envoy_binary.version}, backend: {backend.label}, logs {bed.run_dir})")
        body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": content}],
                "max_tokens": args.max_tokens, "stream": not args.no_stream}
        client = bed.client()
        result = client.chat(body, headers=options.request_headers(args))
        client.flush()
        served = result.status == 200
        pod = bed.served_pod(result.headers)  # None when no pod answered
        print(f"HTTP {result.status}" + (f" from {pod}" if pod else "") + ": "
              + (repr(result.text) if served else json.dumps(result.body) if result.body is not None else result.error or ""))
        if result.ttft_ms is not None:
            print(f"client TTFT {result.ttft_ms:.1f} ms, end to end {result.e2e_ms:.1f} ms, {len(result.tokens)} tokens")
        try:
            hop = bed.hop(result)
        except PollTimeout:
            hop = None
        if hop is not None:
            print(f"Envoy's record: {hop.describe()}")
        if served:
            # Every span the kit's own parts emit, and the backend's as far as it traces (--backend-spans).
            try:
                trace = bed.jaeger.wait_for_trace(result.trace_id, bed.expected_spans(media_items=args.images),
                                                  timeout_s=15)
            except TraceIncomplete as exc:
                print(f"trace incomplete: {exc}", file=sys.stderr)
                return 1
        else:
            # Refused on the way: the trace holds what happened up to there; wait until it is quiet.
            trace = bed.jaeger.wait_for_trace(result.trace_id, (), quiet_s=1.0, timeout_s=15)
        print()
        print(waterfall.render(trace))
        if not served:
            print(f"\n{_where_it_stopped(trace, hop, result.status)}")
        saved = bed.run_dir / f"trace-{result.trace_id}.json"
        saved.write_text(json.dumps(bed.jaeger.get_trace_json(result.trace_id), indent=1))
        print(f"\ntrace {result.trace_id} saved as OTLP JSON (Jaeger /api/v3): {saved}")
        page = html.write_trace_page(saved.with_suffix(".html"), html.trace_views([trace], mode=bed.mode),
                                     title=f"eppkit run: {bed.topology.mode}, {args.flow}, {runtime}")
        print(f"its waterfall, to open in a browser: {page}")
        _print_own_trace(bed, trace)
        client.close()
        return 0 if served else 1


def _where_it_stopped(trace, hop, status: int) -> str:
    """Where a refused request stopped: the last span that was reached, and Envoy's own reason."""
    from eppkit.observability import expected_spans as ex

    reached_backend = any(ex.UPSTREAM.matches(s) for s in trace.spans)
    last = max((s for s in trace.spans if s.service != "client"), key=lambda s: s.start_us, default=None)
    where = ("the backend answered it" if reached_backend else
             "it never left Envoy (no upstream request)" if last is None or last.service == "envoy" else
             f"it stopped at {last.label}")
    why = f"; Envoy says: {hop['details']}" + (f", flags {hop['flags']}" if hop["flags"] not in (None, "-") else "") \
        if hop is not None else ""
    return f"HTTP {status}: {where}{why}."


def _print_own_trace(bed, trace) -> None:
    """The picker's spans that form a trace of their own (an upstream EPP's), found by the request's time."""
    from eppkit.core.polling import PollTimeout, poll

    service = bed.mode.own_trace_service
    if not service:
        return
    try:
        spans = poll(lambda: bed.jaeger.spans_between(service, trace.start_us, trace.end_us), timeout_s=15,
                     interval_s=0.5, describe=f"{service}'s spans")
    except PollTimeout:
        print(f"\n{service} exports its spans as a trace of its own: none found in Jaeger for this request's time")
        return
    print(f"\n{service} exports its spans as a trace of its own (it reads no trace context from Envoy); "
          f"found by this request's time:")
    for span in spans:
        print(f"  trace {span.trace_id}  {span.name}  {span.duration_ms:.2f} ms  {bed.jaeger.trace_url(span.trace_id)}")


