"""python -m least_loaded_epp --port 9002 --health-port 9003 --endpoints 10.0.0.1:8000,10.0.0.2:8000"""

from __future__ import annotations

import argparse
import asyncio
import signal

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from least_loaded_epp.picker import LeastLoaded
from least_loaded_epp.server import Processor

HEALTH = ("", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor")


async def serve(args: argparse.Namespace) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "least-loaded-epp"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_* from the environment
    trace.set_tracer_provider(provider)
    endpoints = [e.split("=")[-1].strip() for e in args.endpoints.split(",") if e.strip()]
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 80 << 20)])
    pb_grpc.add_ExternalProcessorServicer_to_server(Processor(LeastLoaded(endpoints), args.shed_header), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    checks = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    for service in HEALTH:
        await servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, checks)
    checks.add_insecure_port(f"127.0.0.1:{args.health_port}")
    await server.start()
    await checks.start()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)
    await checks.stop(1)
    provider.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m least_loaded_epp", description=__doc__)
    p.add_argument("--port", type=int, required=True, help="the ext_proc port Envoy connects to")
    p.add_argument("--health-port", type=int, required=True, help="grpc.health.v1")
    p.add_argument("--endpoints", required=True, help="the pool: ip:port,ip:port")
    p.add_argument("--shed-header", default="", help="a request header that makes it shed the request (429)")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
