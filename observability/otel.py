"""OpenTelemetry set-up shared by every eppkit process.

Services call :func:`setup_tracing` once at start-up and :func:`shutdown_tracing`
on exit so no span is lost. Context crosses process boundaries as W3C
``traceparent`` headers: use :func:`extract` on incoming headers and
:func:`inject` on outgoing ones.
"""

from __future__ import annotations

from typing import Mapping, MutableMapping

from eppkit.core.settings import Settings, settings
from eppkit.observability.contract import ResourceAttributes
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

OTLP_ENDPOINT_ENV = Settings.variable("otlp_endpoint")

_provider: TracerProvider | None = None


def setup_tracing(
    service_name: str,
    otlp_endpoint: str | None = None,
    *,
    instance: str | None = None,
    schedule_delay_ms: int = 200,
    scope: str | None = None,
) -> trace.Tracer:
    """Install a tracer provider that exports to Jaeger over OTLP gRPC.

    ``otlp_endpoint`` is ``host:port`` (or ``http://host:port``); when neither it
    nor ``$EPPKIT_OTLP_ENDPOINT`` is set, spans are created but not exported, so
    a service still runs outside the testbed. The short schedule delay makes
    spans reach Jaeger within a fraction of a second, which tests rely on. ``scope``: the tracer's
    instrumentation scope (default: the service's name).
    """
    global _provider
    attributes = {ResourceAttributes.SERVICE_NAME: service_name}
    if instance:
        attributes[ResourceAttributes.SERVICE_INSTANCE_ID] = instance
    provider = TracerProvider(resource=Resource.create(attributes))
    endpoint = otlp_endpoint or settings().otlp_endpoint
    if endpoint:
        if "://" not in endpoint:
            endpoint = f"http://{endpoint}"
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                schedule_delay_millis=schedule_delay_ms,
                max_queue_size=65536,
                max_export_batch_size=2048,
            )
        )
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider.get_tracer(scope or service_name)


def shutdown_tracing() -> None:
    """Flush pending spans; safe to call more than once."""
    global _provider
    if _provider is not None:
        _provider.force_flush(timeout_millis=5000)
        _provider.shutdown()
        _provider = None


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The remote parent context carried by ``traceparent`` in ``headers``."""
    return propagate.extract(headers)


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current span's ``traceparent`` to ``headers`` and return them."""
    propagate.inject(headers)
    return headers
