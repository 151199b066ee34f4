"""``python -m eppkit.services.callout``: the routing service of the external-callout modes."""

from __future__ import annotations

import argparse
import logging

from eppkit.observability import otel
from eppkit.services import runner
from eppkit.services.callout.app import Picker, PickLatency, make_app
from eppkit.services.callout.scorers import SCORERS, make_scorer, parse_endpoints


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eppkit.services.callout", description=__doc__)
    runner.add_common_args(parser, default_port=9002)
    parser.add_argument(
        "--endpoints",
        default="",
        help="the pool: host:port=name[@model],... (@model limits an endpoint to requests whose "
        "x-gateway-model-name names that model; empty pool: every pick is 503)",
    )
    parser.add_argument("--scorer", choices=sorted(SCORERS), default="round-robin", help="default: %(default)s")
    parser.add_argument("--prefill-endpoints", default="",
                        help="disaggregated flows: prefillers host:port=name,...; each pick also names one "
                        "(x-prefiller-host-port), scored like --scorer")
    parser.add_argument("--encoder-endpoints", default="",
                        help="disaggregated flows: encoders host:port=name,...; a request with media also gets "
                        "x-encoder-hosts-ports (one encoder per item at most, rotating)")
    parser.add_argument("--pick-latency", type=float, default=0.0, help="ms each pick takes on purpose (default: 0)")
    parser.add_argument(
        "--pick-latency-jitter", type=float, default=0.0, help="ms of uniform jitter around --pick-latency, <= 30%% of it"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for the latency jitter (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    runner.configure_logging(args.log_level)
    try:
        endpoints = parse_endpoints(args.endpoints)
        prefill = parse_endpoints(args.prefill_endpoints)
        encoders = parse_endpoints(args.encoder_endpoints)
        latency = PickLatency(args.pick_latency, args.pick_latency_jitter)
    except ValueError as exc:
        parser.error(str(exc))
    tracer = otel.setup_tracing("callout", args.otlp_endpoint)
    picker = Picker(endpoints, make_scorer(args.scorer), prefill=prefill, encoders=encoders,
                    prefill_scorer=make_scorer(args.scorer))
    logging.getLogger("callout").info(
        "pool: %s; scorer %s", ", ".join(f"{e.name}={e.address}" for e in endpoints) or "(empty)", args.scorer
    )
    app = make_app(picker, latency=latency, seed=args.seed, tracer=tracer)
    runner.serve(app, host=args.host, port=args.port, name="callout")


if __name__ == "__main__":
    main()
