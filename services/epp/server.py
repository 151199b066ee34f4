"""The EPP as a grpc.aio ExternalProcessor server."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import grpc
from opentelemetry import trace

from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from observability import otel
from services.epp.picker import Picker
from services.epp.pool import MetricsScraper
from services.epp.stream import StreamProcessor

log = logging.getLogger("epp")


def incoming_context(context: grpc.aio.ServicerContext):
    """The W3C trace context Envoy put into the gRPC initial metadata (``traceparent``)."""
    metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    if log.isEnabledFor(logging.DEBUG):
        log.debug("stream metadata: %s", {k: v for k, v in metadata.items() if k in ("traceparent", "tracestate", "x-request-id")} | {"keys": sorted(metadata)})
    return otel.extract(metadata)


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: Picker, tracer: trace.Tracer):
        self.picker = picker
        self.tracer = tracer

    async def Process(self, request_iterator, context):  # noqa: N802 (gRPC method name)
        stream = StreamProcessor(self.picker, self.tracer, incoming_context(context))
        try:
            async for request in request_iterator:
                for response in await stream.handle(request):
                    yield response
        finally:
            stream.close()


@dataclass
class EppServer:
    """The running server: gRPC listener, metrics scraper, picker; ``stop()`` undoes all three."""

    server: grpc.aio.Server
    scraper: MetricsScraper
    picker: Picker
    port: int

    async def stop(self, grace_s: float = 1.0) -> None:
        await self.server.stop(grace_s)
        await self.scraper.stop()
        await self.picker.close()


async def start(host: str, port: int, picker: Picker, scraper: MetricsScraper, tracer: trace.Tracer) -> EppServer:
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(picker, tracer), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind {host}:{port}")
    # Metrics first: the first pick should already see which endpoints are up.
    await scraper.start()
    if hasattr(picker, "start"):
        await picker.start()
    await server.start()
    log.info("epp listening on grpc://%s:%d (scorer %s)", host, bound, picker.scorer_name)
    return EppServer(server, scraper, picker, bound)


async def serve_forever(host: str, port: int, picker: Picker, scraper: MetricsScraper, tracer: trace.Tracer) -> None:
    running = await start(host, port, picker, scraper, tracer)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await running.stop()
