"""``python -m eppkit.services.epp``: the Endpoint Picker as an Envoy ext_proc gRPC server.

    python -m eppkit.services.epp --port 9002 --endpoints vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002 \
        --scorer prefix-cache --metrics-interval 0.5

Sidecar mode (the Dynamo proposal): add ``--frontend-url http://127.0.0.1:PORT`` and every
decision is asked of the frontend with ``x-routing-request: true``.

Disaggregated flows: ``--prefill-endpoints`` / ``--encoder-endpoints`` make the EPP choose a
prefiller and encoders too, passed as ``x-prefiller-host-port`` / ``x-encoder-hosts-ports``
(services/epp/stages.py). Two-phase multipart flow: ``--multipart`` (services/epp/stream.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from eppkit.observability import otel
from eppkit.services.epp import server
from eppkit.services.epp.picker import FrontendPicker, LocalPicker
from eppkit.services.epp.pool import MetricsScraper, Pool, parse_endpoints
from eppkit.services.epp.scorers import SCORERS, make_scorer
from eppkit.services.epp.stages import StagePicker
from eppkit.services.epp.stream import MULTIPART_TRIGGERS
from eppkit.services.runner import add_common_args, configure_logging


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.epp", description=__doc__.splitlines()[0])
    add_common_args(p, default_port=9002)
    p.add_argument(
        "--endpoints",
        default="",
        help="the pool: comma-separated name=host:port (or host:port). Empty: every request gets 503.",
    )
    p.add_argument("--scorer", choices=SCORERS, default="least-queue", help="local scorer (default: %(default)s)")
    p.add_argument(
        "--frontend-url",
        default=None,
        help="sidecar mode: ask this frontend (x-routing-request: true) instead of scoring locally",
    )
    p.add_argument("--frontend-timeout", type=float, default=5.0, help="seconds to wait for the frontend (default: %(default)s)")
    p.add_argument(
        "--metrics-interval",
        type=float,
        default=0.5,
        help="seconds between /metrics scrapes of every endpoint; 0 turns scraping (and health) off (default: %(default)s)",
    )
    p.add_argument(
        "--shed-queue-threshold",
        type=float,
        default=0,
        help="answer 429 when every healthy endpoint's waiting queue (vllm:num_requests_waiting at the "
        "last scrape) is at least this; 0 never sheds (default: %(default)s)",
    )
    p.add_argument("--prefix-block-size", type=int, default=64, help="prefix-cache scorer block size in characters (default: %(default)s)")
    p.add_argument("--max-fallbacks", type=int, default=2, help="fallback endpoints listed in the envoy.lb metadata (default: %(default)s)")
    p.add_argument("--prefill-endpoints", default="",
                   help="disaggregated flows: prefillers (name=host:port,...); the EPP picks one per request "
                   "with --scorer and passes it as x-prefiller-host-port")
    p.add_argument("--encoder-endpoints", default="",
                   help="disaggregated flows: encoders (name=host:port,...); requests with media get "
                   "x-encoder-hosts-ports (one encoder per item at most, rotating)")
    p.add_argument("--multipart", action="store_true",
                   help="two-phase multipart flow: send the body as part 1 and keep the request open; inject the "
                   "metadata part when the response arrives (Envoy must send response headers and body)")
    p.add_argument("--multipart-trigger", choices=MULTIPART_TRIGGERS, default="first-token",
                   help="when part 2 goes: on the first response body chunk of a streamed request (first-token; "
                   "other requests on the headers) or always on the response headers (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    if args.metrics_interval < 0 or args.shed_queue_threshold < 0 or args.max_fallbacks < 0:
        print("--metrics-interval, --shed-queue-threshold and --max-fallbacks cannot be negative", file=sys.stderr)
        return 2
    try:
        pool = Pool(parse_endpoints(args.endpoints))
        scorer = make_scorer(args.scorer, prefix_block_size=args.prefix_block_size)
        stages = StagePicker(Pool(parse_endpoints(args.prefill_endpoints)), Pool(parse_endpoints(args.encoder_endpoints)),
                             make_scorer(args.scorer, prefix_block_size=args.prefix_block_size))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tracer = otel.setup_tracing("epp", args.otlp_endpoint, instance=f"epp-{args.port}")
    if args.frontend_url:
        picker = FrontendPicker(pool, args.frontend_url, timeout_s=args.frontend_timeout, stages=stages)
    else:
        picker = LocalPicker(pool, scorer, shed_threshold=args.shed_queue_threshold, max_fallbacks=args.max_fallbacks,
                             stages=stages)
    scraper = MetricsScraper(pool, interval_s=args.metrics_interval)
    extra = [MetricsScraper(p, interval_s=args.metrics_interval) for p in stages.pools()]
    try:
        asyncio.run(server.serve_forever(args.host, args.port, picker, scraper, tracer,
                                         multipart=args.multipart,
                                         multipart_trigger=args.multipart_trigger, extra_scrapers=extra))
    finally:
        otel.shutdown_tracing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
