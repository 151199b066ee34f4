"""``python -m services.vllm``: the mock vLLM (see docs/mocks.md for every flag)."""

from __future__ import annotations

import argparse
import sys

from observability import otel
from services import runner
from services.vllm.config import ConfigError, add_args, from_args
from services.vllm.server import MockVllm


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m services.vllm", description="Mock vLLM: OpenAI API, P/D roles, latency model, traced.")
    runner.add_common_args(parser, default_port=8000)
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
    tracer = otel.setup_tracing("vllm", args.otlp_endpoint, instance=config.instance)
    app = MockVllm(config, tracer).make_app()
    runner.serve(app, host=args.host, port=args.port, name=f"vllm[{config.instance}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
