"""The EPP as a grpc.aio ExternalProcessor server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from eppkit.observability import otel
from eppkit.services.epp import BODY_PATHS, protocol
from eppkit.services.epp.sidecar import Picker
from eppkit.services.epp.stream import StreamProcessor
from eppkit.services.picker.scraper import MetricsScraper
from eppkit.services.runner import until_stopped
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace

log = logging.getLogger("epp")


def incoming_context(context: grpc.aio.ServicerContext):
    """The W3C trace context Envoy put into the gRPC initial metadata (``traceparent``)."""
    metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    if log.isEnabledFor(logging.DEBUG):
        log.debug("stream metadata: %s", {k: v for k, v in metadata.items() if k in ("traceparent", "tracestate", "x-request-id")} | {"keys": sorted(metadata)})
    return otel.extract(metadata)


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: Picker, tracer: trace.Tracer, *, multipart: bool = False,
                 multipart_trigger: str = "first-token", request_body: str = BODY_PATHS[0]):
        self.picker = picker
        self.request_body = request_body  # how Envoy sends the body (eppkit.services.epp.REQUEST_BODY)
        self.tracer = tracer
        self.multipart = multipart  # the two-phase multipart flow (stream.py, HOLDING)
        self.multipart_trigger = multipart_trigger

    async def Process(self, request_iterator, context):  # noqa: N802 (gRPC method name)
        stream = StreamProcessor(self.picker, self.tracer, incoming_context(context), multipart=self.multipart,
                                 multipart_trigger=self.multipart_trigger, request_body=self.request_body)
        try:
            async for request in request_iterator:
                for response in await stream.handle(request):
                    yield response
        finally:
            stream.close()


@dataclass
class EppServer:
    """The running server: gRPC listener, metrics scrapers, picker; ``stop()`` undoes all three."""

    server: grpc.aio.Server
    scrapers: Sequence[MetricsScraper]
    picker: Picker
    port: int

    async def stop(self, grace_s: float = 1.0) -> None:
        await self.server.stop(grace_s)
        for scraper in self.scrapers:
            await scraper.stop()
        await self.picker.close()


async def start(host: str, port: int, picker: Picker, scrapers: Sequence[MetricsScraper], tracer: trace.Tracer, *,
                multipart: bool = False, multipart_trigger: str = "first-token",
                request_body: str = BODY_PATHS[0]) -> EppServer:
    """``scrapers``: one per pool the picker reads; ``multipart``: the two-phase flow."""
    server = grpc.aio.server(options=list(protocol.SERVER_OPTIONS))
    pb_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(picker, tracer, multipart=multipart, multipart_trigger=multipart_trigger,
                                                                    request_body=request_body), server)
    # grpc.health.v1 on the same port, SERVING once the server runs, for the server ("") and the three
    # services the EPP protocol names: liveness, readiness and the ext_proc service itself.
    health_servicer = health.aio.HealthServicer()
    for service in protocol.HEALTH_SERVICES:
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind {host}:{port}")
    # Metrics first: the first pick should already see which endpoints are up.
    for scraper in scrapers:
        await scraper.start()
    await picker.start()
    await server.start()
    log.info("epp listening on grpc://%s:%d (scorer %s, request body %s%s)", host, bound, picker.scorer_name,
             request_body, ", two-phase multipart" if multipart else "")
    return EppServer(server, tuple(scrapers), picker, bound)


async def serve_forever(host: str, port: int, picker: Picker, scrapers: Sequence[MetricsScraper], tracer: trace.Tracer,
                        *, multipart: bool = False, multipart_trigger: str = "first-token",
                        request_body: str = BODY_PATHS[0]) -> None:
    running = await start(host, port, picker, scrapers, tracer, multipart=multipart, multipart_trigger=multipart_trigger,
                          request_body=request_body)
    await until_stopped()
    await running.stop()
