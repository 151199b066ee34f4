"""``python -m eppkit.services.frontend``: the sidecar frontend (preprocess + route) the EPP asks.

    python -m eppkit.services.frontend --port 8100 --endpoints vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002
"""

from __future__ import annotations

import argparse
import sys

from eppkit.observability import otel
from eppkit.services.epp.pool import MetricsScraper, Pool, parse_endpoints
from eppkit.services.frontend.app import build_app
from eppkit.services.frontend.router import KvRouter
from eppkit.services.runner import add_common_args, configure_logging, serve


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.frontend", description=__doc__.splitlines()[0])
    add_common_args(p, default_port=8100)
    p.add_argument("--endpoints", default="", help="the workers: comma-separated name=host:port[@model] (name = worker id)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default: %(default)s)")
    p.add_argument("--overlap-weight", type=float, default=1.0, help="cost of one block to prefill (default: %(default)s)")
    p.add_argument("--load-weight", type=float, default=0.5, help="cost of one queued request, in blocks (default: %(default)s)")
    p.add_argument(
        "--metrics-interval", type=float, default=0.5,
        help="seconds between /metrics scrapes of the workers; 0: off (default: %(default)s)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        pool = Pool(parse_endpoints(args.endpoints))
        router = KvRouter(pool, block_size=args.block_size, overlap_weight=args.overlap_weight, load_weight=args.load_weight)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.metrics_interval < 0:
        print("error: --metrics-interval cannot be negative", file=sys.stderr)
        return 2
    tracer = otel.setup_tracing("frontend", args.otlp_endpoint, instance=f"frontend-{args.port}")
    scraper = MetricsScraper(pool, interval_s=args.metrics_interval)
    app = build_app(pool, router, tracer)

    async def start_scraper(_app) -> None:
        await scraper.start()

    async def stop_scraper(_app) -> None:
        await scraper.stop()

    app.on_startup.append(start_scraper)
    app.on_cleanup.append(stop_scraper)
    serve(app, host=args.host, port=args.port, name="frontend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
