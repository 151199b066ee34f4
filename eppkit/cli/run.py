"""`eppkit run`: start a testbed, send one traced request, print its waterfall, save its trace, stop."""

from __future__ import annotations

import json
import sys
import time

from eppkit import options
from eppkit.runtimes import create


def main(args) -> int:
    from eppkit.observability import html, waterfall
    from eppkit.observability.jaeger_client import TraceIncomplete

    content: object = args.prompt
    if args.images:
        content = [{"type": "text", "text": args.prompt}] + [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{'QUJD' * (16 + i)}"}}
            for i in range(args.images)]
    t0 = time.monotonic()
    with create(options.topology(args), runtime=args.runtime) as bed:
        backend = bed.topology.backend
        print(f"testbed up in {time.monotonic() - t0:.1f}s (mode={bed.topology.mode}, runtime={args.runtime}, "
              f"envoy {bed.envoy_binary.version}, backend: {backend.label}, logs {bed.run_dir})")
        body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": content}],
                "max_tokens": args.max_tokens, "stream": not args.no_stream}
        client = bed.client()
        result = client.chat(body)
        client.flush()
        print(f"HTTP {result.status} from {bed.served_pod(result.headers) or '?'}: {result.text!r}")
        if result.ttft_ms is not None:
            print(f"client TTFT {result.ttft_ms:.1f} ms, end to end {result.e2e_ms:.1f} ms, {len(result.tokens)} tokens")
        # Every span the kit's own parts emit, and the backend's as far as it traces (--backend-spans).
        expected = bed.expected_spans(media_items=args.images)
        try:
            trace = bed.jaeger.wait_for_trace(result.trace_id, expected, timeout_s=15)
        except TraceIncomplete as exc:
            print(f"trace incomplete: {exc}", file=sys.stderr)
            return 1
        print()
        print(waterfall.render(trace))
        saved = bed.run_dir / f"trace-{result.trace_id}.json"
        saved.write_text(json.dumps(bed.jaeger.get_trace_json(result.trace_id), indent=1))
        print(f"\ntrace {result.trace_id} saved as OTLP JSON (Jaeger /api/v3): {saved}")
        page = html.write_trace_page(saved.with_suffix(".html"), html.trace_views([trace]),
                                     title=f"eppkit run: {bed.topology.mode}, {args.flow}, {args.runtime}")
        print(f"its waterfall, to open in a browser: {page}")
        _print_own_trace(bed, trace)
        client.close()
        return 0 if result.status == 200 else 1


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


