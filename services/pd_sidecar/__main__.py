"""python -m eppkit.services.pd_sidecar: the E/P/D disaggregation sidecar in front of a decode instance."""

from __future__ import annotations

import argparse

from eppkit.observability import otel
from eppkit.observability.contract import Service
from eppkit.services import runner
from eppkit.services.pd_sidecar.server import PdSidecar, SidecarConfig


def _endpoints(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eppkit.services.pd_sidecar", description=__doc__)
    runner.add_common_args(parser, default_port=8100)
    parser.add_argument("--decode", required=True, help="URL of the local decode (or PD) instance, e.g. http://127.0.0.1:8200")
    parser.add_argument("--prefill-endpoints", type=_endpoints, default=[],
                        help="host:port,... used round robin when the request has no x-prefiller-host-port")
    parser.add_argument("--encoder-endpoints", type=_endpoints, default=[],
                        help="host:port,... used when the request has no x-encoder-hosts-ports")
    parser.add_argument("--stream-first-token", action="store_true",
                        help="stream prefill's first token to the client at once and strip decode's duplicate (ttft flow)")
    parser.add_argument("--disable-prefill", action="store_true", help="E+PD: the decode instance prefills itself")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds for any upstream call")
    parser.add_argument("--instance", default="pd-sidecar-0", help="instance name in spans")
    parser.add_argument("--decode-instance", default="", help="the decoder's instance name (x-inference-pod on early answers)")
    args = parser.parse_args(argv)
    runner.configure_logging(args.log_level)
    tracer = otel.setup_tracing(Service.PD_SIDECAR, args.otlp_endpoint, instance=args.instance)
    sidecar = PdSidecar(SidecarConfig(
        decode_url=args.decode.rstrip("/"), prefill_endpoints=args.prefill_endpoints,
        encoder_endpoints=args.encoder_endpoints, stream_first_token=args.stream_first_token,
        disable_prefill=args.disable_prefill, request_timeout_s=args.request_timeout,
        decode_instance=args.decode_instance,
    ), tracer)
    runner.serve(sidecar.make_app(), host=args.host, port=args.port, name="pd-sidecar")


if __name__ == "__main__":
    main()
