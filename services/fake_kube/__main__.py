"""``python -m eppkit.services.fake_kube``: the fake Kubernetes API an upstream EPP reads its pool from."""

from __future__ import annotations

import argparse
import logging
import sys

from aiohttp import web
from eppkit.services.fake_kube import app
from eppkit.services.fake_kube.app import KUBECONFIG, FakeKube, build_app


def app_doc() -> str:
    return app.__doc__ or ""


def read_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the pool's defaults (target port 8000, label app=vllm) filled in."""
    p = argparse.ArgumentParser(prog="python -m eppkit.services.fake_kube", description=app_doc(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=16443)
    p.add_argument("--namespace", default="default")
    p.add_argument("--pool-name", default="vllm-pool")
    p.add_argument("--target-port", type=int, action="append", default=None, help="pool targetPorts (repeatable)")
    p.add_argument("--epp-port", type=int, default=9002, help="endpointPickerRef port (informational)")
    p.add_argument("--label", action="append", default=None, help="pod label / pool selector k=v (repeatable)")
    p.add_argument("--pod", action="append", default=[], help="name=podIP (repeatable)")
    p.add_argument("--no-pool", action="store_true", help="serve no InferencePool (standalone --endpoint-selector mode)")
    p.add_argument("--with-v1alpha2", action="store_true", help="also serve the x-k8s.io/v1alpha2 group (empty)")
    p.add_argument("--no-watchlist", action="store_true", help="reject sendInitialEvents watches with 422 (pre-WatchList server)")
    p.add_argument("--bookmark-interval", type=float, default=5.0)
    p.add_argument("--kubeconfig-out", help="write a kubeconfig pointing here to this path")
    args = p.parse_args(argv)
    args.target_port = args.target_port or [8000]
    args.label = args.label or ["app=vllm"]
    return args


def main(argv: list[str] | None = None) -> None:
    args = read_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s.%(msecs)03d fake_kube %(message)s",
                        datefmt="%H:%M:%S")
    if args.kubeconfig_out:
        with open(args.kubeconfig_out, "w") as f:
            f.write(KUBECONFIG.format(host=args.host, port=args.port, ns=args.namespace))
    web.run_app(build_app(FakeKube(args)), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
