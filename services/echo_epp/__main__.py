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
from eppkit.services.echo_epp.queue import FAULTS, EchoQueue, parse_priorities
from eppkit.services.echo_epp.server import Pool, serve
from eppkit.services.picker.flow_control import DEFAULT_REQUEST_TTL_S
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.roles import parse_roles
from eppkit.services.runner import add_common_args, configure_logging, run_then_flush


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.echo_epp", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="misbehaviours:\n" + "\n".join(f"  {k:<24} {v}" for k, v in MISBEHAVIOURS.items()))
    add_common_args(p, default_port=9002)
    p.add_argument("--endpoints", required=True, help="the pool: [name=]host:port,... (names are ignored)")
    p.add_argument("--max-fallbacks", type=int, default=2, help="endpoints after the primary (default: %(default)s)")
    p.add_argument("--pod-roles", default="", help="each pod's llm-d.ai/role, ip:port=prefill|decode|both,... "
                   "(an EPP command's {pod_roles}; default: none, every pod serves whole requests)")
    p.add_argument("--shed-header", default="", help="a request header that makes it shed the request (429)")
    p.add_argument("--flow-control", action="store_true",
                   help="queue requests while the pool is saturated (its /metrics), by priority band and fairness id "
                        "(implied by the flow-control faults)")
    p.add_argument("--priorities", default="", metavar="NAME=N,...",
                   help="flow control: the InferenceObjectives' priorities (it reads no control plane; others: 0)")
    p.add_argument("--default-request-ttl", type=float, default=DEFAULT_REQUEST_TTL_S, metavar="S",
                   help="flow control: seconds a request may wait, then 429 (default: %(default)s)")
    p.add_argument("--misbehave", choices=sorted(MISBEHAVIOURS), default="none",
                   help="commit this protocol fault (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        pool = Pool([ep.address for ep in parse_endpoints(args.endpoints)], parse_roles(args.pod_roles))
        queue = EchoQueue(args.endpoints, priorities=parse_priorities(args.priorities), ttl_s=args.default_request_ttl,
                          misbehave=args.misbehave) if args.flow_control or args.misbehave in FAULTS else None
    except ValueError as exc:
        print(f"echo-epp: {exc}", file=sys.stderr)
        return 2
    tracer = otel.setup_tracing(Service.ECHO_EPP, args.otlp_endpoint, instance=f"echo-epp-{args.port}")
    return run_then_flush(lambda: asyncio.run(serve(args.host, args.port, pool, tracer, misbehave=args.misbehave,
                                                    max_fallbacks=args.max_fallbacks, shed_header=args.shed_header,
                                                    queue=queue)))


if __name__ == "__main__":
    sys.exit(main())
