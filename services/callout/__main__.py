"""``python -m eppkit.services.callout``: the routing service of the external-callout modes."""

from __future__ import annotations

import argparse
import logging

from eppkit.observability.contract import Service
from eppkit.services import runner
from eppkit.services.callout.app import PickLatency, make_app
from eppkit.services.picker import settings, transport


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eppkit.services.callout", description=__doc__)
    runner.add_common_args(parser, default_port=9002)
    settings.add_arguments(parser)
    parser.add_argument("--pick-latency", type=float, default=0.0, help="ms each pick takes on purpose (default: 0)")
    parser.add_argument(
        "--pick-latency-jitter", type=float, default=0.0, help="ms of uniform jitter around --pick-latency, <= 30%% of it"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for the latency jitter (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, picker, scrapers, tracer = transport.prepare(parser, argv, Service.CALLOUT)
    try:
        latency = PickLatency(args.pick_latency, args.pick_latency_jitter)
    except ValueError as exc:
        parser.error(str(exc))
    logging.getLogger("callout").info(
        "pool: %s; scorer %s", ", ".join(f"{e.name}={e.address}" for e in picker.pool.endpoints) or "(empty)",
        picker.scorer_name)
    app = make_app(picker, latency=latency, seed=args.seed, tracer=tracer)
    runner.serve(app, host=args.host, port=args.port, name="callout", background=scrapers)


if __name__ == "__main__":
    main()
