"""``python -m eppkit.services.encoder``: the mock multimodal encoder (see docs/mocks.md)."""

from __future__ import annotations

import argparse
import sys

from eppkit.observability import otel
from eppkit.observability.contract import Service
from eppkit.services import runner
from eppkit.services.encoder.config import ConfigError, add_args, from_args
from eppkit.services.encoder.server import MockEncoder


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eppkit.services.encoder", description="Mock multimodal encoder: per-item encode spans, shared encoder cache.")
    runner.add_common_args(parser, default_port=8100)
    add_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    runner.configure_logging(args.log_level)
    tracer = otel.setup_tracing(Service.ENCODER, args.otlp_endpoint, instance=config.instance)
    runner.serve(MockEncoder(config, tracer).make_app(), host=args.host, port=args.port, name=f"encoder[{config.instance}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
