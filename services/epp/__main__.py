"""``python -m eppkit.services.epp``: the Endpoint Picker as an Envoy ext_proc gRPC server.

    python -m eppkit.services.epp --port 9002 --endpoints vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002 \
        --scorer prefix-cache-scorer

The picking is the picker core's (eppkit.services.picker): the pool and scorer flags are the
same in every transport. As a Kubernetes controller, like GAIE's EPP, it learns its pool from an
InferencePool instead (eppkit.services.picker.kube_pool):

    python -m eppkit.services.epp --port 9002 --kubeconfig kubeconfig --pool-namespace default --pool-name vllm-pool
 Sidecar mode (the Dynamo proposal): add ``--frontend-url
http://127.0.0.1:PORT`` and every decoder decision is asked of the frontend with
``x-routing-request: true``. Disaggregated flows: ``--prefill-endpoints`` / ``--encoder-endpoints``
make the EPP choose a prefiller and encoders too, passed as ``x-prefiller-host-port`` /
``x-encoder-hosts-ports``. Two-phase multipart flow: ``--multipart`` (services/epp/stream.py).
"""

from __future__ import annotations

import argparse
import sys

from eppkit.observability.contract import Service
from eppkit.services.epp import BODY_PATHS, MULTIPART_TRIGGERS, server
from eppkit.services.epp.sidecar import FrontendPicker
from eppkit.services.picker import settings, transport
from eppkit.services.runner import add_common_args, run_loop, run_then_flush


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eppkit.services.epp", description=__doc__.splitlines()[0])
    add_common_args(p, default_port=9002)
    settings.add_arguments(p)
    p.add_argument(
        "--frontend-url",
        default=None,
        help="sidecar mode: ask this frontend (x-routing-request: true) instead of scoring locally",
    )
    p.add_argument("--frontend-timeout", type=float, default=5.0, help="seconds to wait for the frontend (default: %(default)s)")
    p.add_argument("--multipart", action="store_true",
                   help="two-phase multipart flow: send the body as part 1 and keep the request open; inject the "
                   "metadata part when the response arrives (Envoy must send response headers and body)")
    p.add_argument("--multipart-trigger", choices=MULTIPART_TRIGGERS, default=MULTIPART_TRIGGERS[0],
                   help="when part 2 goes: on the first response body chunk of a streamed request (first-token; "
                   "other requests on the headers) or always on the response headers (default: %(default)s)")
    p.add_argument("--request-body", choices=BODY_PATHS, default=BODY_PATHS[0],
                   help="how Envoy sends the request body (its request_body_mode): streamed (FULL_DUPLEX_STREAMED), "
                   "buffered (BUFFERED: one message) or none (NONE: decide on the headers) (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args, picker, scrapers, tracer = transport.prepare(build_parser(), argv, Service.EPP)
    if args.frontend_url:
        picker = FrontendPicker(picker, args.frontend_url, timeout_s=args.frontend_timeout)
    return run_then_flush(lambda: run_loop(server.serve_forever(
        args.host, args.port, picker, scrapers, tracer, multipart=args.multipart,
        multipart_trigger=args.multipart_trigger, request_body=args.request_body)))


if __name__ == "__main__":
    sys.exit(main())
