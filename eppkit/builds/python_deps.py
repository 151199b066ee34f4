"""Repair a known clash between two wheels we depend on.

xds-protos ships its own (older) copy of ``opentelemetry/proto/**``, the same files the
opentelemetry-proto wheel installs. Whichever pip installs last wins; when xds-protos
wins, the OTLP exporter fails to import (``InstrumentationScope`` is missing). The fix is
to reinstall opentelemetry-proto's files over it; both packages then work, because the
newer protos are a superset of what xds-protos's Envoy protos import.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

_PROBE = "from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope"


def otel_protos_ok() -> bool:
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True)
    return proc.returncode == 0


def repair_otel_protos(progress=print) -> bool:
    """Returns True when a repair was needed and done."""
    if otel_protos_ok():
        return False
    version = metadata.version("opentelemetry-proto")
    progress(f"opentelemetry-proto files were overwritten by xds-protos; reinstalling opentelemetry-proto=={version}")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
         f"opentelemetry-proto=={version}"],
        check=True,
    )
    if not otel_protos_ok():
        raise RuntimeError("opentelemetry-proto still broken after reinstall; try a fresh virtualenv")
    return True
