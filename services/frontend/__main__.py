"""``python -m eppkit.services.frontend``: the sidecar frontend (preprocess + route) the EPP asks.

    python -m eppkit.services.frontend --port 8100 --endpoints vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002 \
        --scorer kv-router-scorer

The pool and scorer flags are the picker core's (eppkit.services.picker), as in every transport.
"""

from __future__ import annotations

import argparse
import sys

from eppkit.observability import otel
from eppkit.observability.contract import Service
from eppkit.services.frontend.app import build_app
from eppkit.services.picker import settings
from eppkit.services.runner import add_common_args, configure_logging, serve


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.frontend", description=__doc__.splitlines()[0])
    add_common_args(p, default_port=8100)
    # The EPP in front picks the prefillers and encoders; the frontend names the worker (decoder).
    settings.add_arguments(p, stages=False)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        picker, scrapers = settings.build(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tracer = otel.setup_tracing(Service.FRONTEND, args.otlp_endpoint, instance=f"frontend-{args.port}")
    serve(build_app(picker, tracer), host=args.host, port=args.port, name="frontend", background=scrapers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
