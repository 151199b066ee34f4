"""``python -m eppkit.services.frontend``: the sidecar frontend (preprocess + route) the EPP asks.

    python -m eppkit.services.frontend --port 8100 --endpoints vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002 \
        --scorer kv-router-scorer

The pool and scorer flags are the picker core's (eppkit.services.picker), as in every transport.
"""

from __future__ import annotations

import argparse
import sys

from eppkit.observability.contract import Service
from eppkit.services.frontend.app import build_app
from eppkit.services.picker import settings, transport
from eppkit.services.runner import add_common_args, serve


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.frontend", description=__doc__.splitlines()[0])
    add_common_args(p, default_port=8100)
    # The EPP in front picks the prefillers and encoders; the frontend names the worker (decoder).
    settings.add_arguments(p, stages=False)
    return p


def main(argv: list[str] | None = None) -> int:
    args, picker, scrapers, tracer = transport.prepare(build_parser(), argv, Service.FRONTEND)
    serve(build_app(picker, tracer), host=args.host, port=args.port, name="frontend", background=scrapers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
