"""``python -m eppkit.services.echo_epp``: the echo EPP (the floor of an EPP hop, and a protocol fault on demand).

    python -m eppkit.services.echo_epp --port 9002 --endpoints 127.0.0.1:8001,127.0.0.1:8002
    python -m eppkit.services.echo_epp --port 9002 --endpoints ... --misbehave drop-end-of-stream
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from eppkit.observability import otel
from eppkit.observability.contract import Service
from eppkit.services.echo_epp import MISBEHAVIOURS
from eppkit.services.echo_epp.server import Pool, serve
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.runner import add_common_args, configure_logging, run_then_flush


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.echo_epp", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="misbehaviours:\n" + "\n".join(f"  {k:<24} {v}" for k, v in MISBEHAVIOURS.items()))
    add_common_args(p, default_port=9002)
    p.add_argument("--endpoints", required=True, help="the pool: [name=]host:port,... (names are ignored)")
    p.add_argument("--max-fallbacks", type=int, default=2, help="endpoints after the primary (default: %(default)s)")
    p.add_argument("--shed-header", default="", help="a request header that makes it shed the request (429)")
    p.add_argument("--misbehave", choices=sorted(MISBEHAVIOURS), default="none",
                   help="commit this protocol fault (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        pool = Pool([ep.address for ep in parse_endpoints(args.endpoints)])
    except ValueError as exc:
        print(f"echo-epp: --endpoints: {exc}", file=sys.stderr)
        return 2
    tracer = otel.setup_tracing(Service.ECHO_EPP, args.otlp_endpoint, instance=f"echo-epp-{args.port}")
    return run_then_flush(lambda: asyncio.run(serve(args.host, args.port, pool, tracer, misbehave=args.misbehave,
                                                    max_fallbacks=args.max_fallbacks, shed_header=args.shed_header)))


if __name__ == "__main__":
    sys.exit(main())
