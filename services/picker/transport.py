"""What every picker transport's ``main`` does first: read its flags, log, build the picker, trace.

Not imported by the testbed (it sets up OpenTelemetry's exporter); the transports (services/epp,
services/callout, services/frontend) call :func:`prepare` from their ``__main__``.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from eppkit.observability import otel
from eppkit.services.picker.core import Picker
from eppkit.services.picker.scraper import MetricsScraper
from eppkit.services.picker.settings import build_or_exit
from eppkit.services.runner import configure_logging
from opentelemetry import trace


def prepare(parser: argparse.ArgumentParser, argv: Sequence[str] | None, service: str
            ) -> tuple[argparse.Namespace, Picker, list[MetricsScraper], trace.Tracer]:
    """Parsed flags, the picker and its scrapers (a bad flag exits 2), and the tracer of ``service``."""
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    picker, scrapers = build_or_exit(args)
    tracer = otel.setup_tracing(service, args.otlp_endpoint, instance=f"{service}-{args.port}")
    return args, picker, scrapers, tracer
