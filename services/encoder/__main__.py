"""``python -m eppkit.services.encoder``: the mock multimodal encoder (see docs/mocks.md)."""

from __future__ import annotations

import argparse
import sys

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
    return runner.run_mock(build_parser(), argv, read_config=from_args, config_error=ConfigError,
                           service=Service.ENCODER, make_app=lambda config, tracer: MockEncoder(config, tracer).make_app())


if __name__ == "__main__":
    sys.exit(main())
