"""``python -m eppkit.services.vllm``: the mock vLLM (see docs/mocks.md for every flag)."""

from __future__ import annotations

import argparse
import gc
import sys

from eppkit.observability.contract import Service
from eppkit.services import runner
from eppkit.services.vllm.config import ConfigError, add_args, from_args
from eppkit.services.vllm.server import TRACER_SCOPE, MockVllm


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eppkit.services.vllm", description="Mock vLLM: OpenAI API, P/D roles, latency model, traced.")
    runner.add_common_args(parser, default_port=8000)
    add_args(parser)
    return parser


async def _quiet_gc(app) -> None:
    """Keep the cyclic GC from pausing token streams.

    Everything alive at start-up (aiohttp, OpenTelemetry, their modules) is frozen out of
    the collector, and the young-generation threshold is raised, so a full collection
    does not walk a few hundred thousand start-up objects in the middle of a stream.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10000, 50, 100)


def _app(config, tracer):
    app = MockVllm(config, tracer).make_app()
    app.on_startup.append(_quiet_gc)
    return app


def main(argv: list[str] | None = None) -> int:
    return runner.run_mock(build_parser(), argv, read_config=from_args, config_error=ConfigError,
                           service=Service.VLLM, make_app=_app, scope=TRACER_SCOPE)


if __name__ == "__main__":
    sys.exit(main())
