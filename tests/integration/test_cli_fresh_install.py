"""The CLI on a fresh install, before `eppkit bootstrap` repaired the xds-protos / opentelemetry-proto clash.

pip may leave xds-protos's older copy of opentelemetry/proto/** on top of opentelemetry-proto's,
so the OTLP exporter does not import. `eppkit bootstrap` is the command that repairs it and
`eppkit doctor` the one that reports it: neither may die of the breakage they exist to fix.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

# Run in a fresh interpreter: the breakage is simulated by blocking the exporter's import, which
# must happen before anything in this process imported it.
_BROKEN_OTLP = """
import sys
sys.modules["opentelemetry.exporter.otlp.proto.grpc.trace_exporter"] = None  # import raises ImportError
# The clash breaks the protos themselves (trace_pb2 without TracesData): the trace model cannot load either.
sys.modules["opentelemetry.proto.trace.v1.trace_pb2"] = None
from eppkit import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _cli_with_broken_otlp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BROKEN_OTLP, *args], capture_output=True, text=True, timeout=60)


def test_bootstrap_parses_when_the_otlp_exporter_does_not_import():
    proc = _cli_with_broken_otlp("bootstrap", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: eppkit bootstrap" in proc.stdout


def test_compare_on_a_broken_install_says_to_run_bootstrap():
    proc = _cli_with_broken_otlp("compare", "--modes", "direct")
    assert proc.returncode == 1
    assert "cannot import the testbed" in proc.stderr
    assert "Hint: run 'eppkit bootstrap'" in proc.stderr


def test_help_lists_compare_even_on_a_broken_install():
    proc = _cli_with_broken_otlp("--help")
    assert proc.returncode == 0, proc.stderr
    assert "compare" in proc.stdout and "bootstrap" in proc.stdout
