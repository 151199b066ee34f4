"""The conformance checks: one module per kind (protocol, responses, data plane, latency, tracing), each check a function
registered with :func:`eppkit.conformance.checks.registry.check` (rules, statuses and levels: that module).
Adding a check is one decorated function in one of these modules, plus the broken EPP that fails it
(``python -m eppkit.services.echo_epp --misbehave``) in tests/e2e/test_conformance_suite.py.
"""

from __future__ import annotations

from eppkit.conformance.checks.registry import CHECKS, STATUSES, Check, Result
from eppkit.core.registry import load_members

__all__ = ["CHECKS", "STATUSES", "Check", "Result"]


# The order they run in: the protocol first (every other check needs its requests served), sustained load (beside
# the checks after it, up to the latency budget), the response path, saturation (beside the data plane's and
# routing's checks), the data plane, routing (what the EPP declares it routes by), the latency budget (over every
# request the suite sent), tracing; a module added later runs last.
ORDER = ("protocol", "sustained", "responses", "saturation", "data_plane", "routing", "latency", "tracing")


load_members(__name__, __path__, group="checks", skip=("registry",), order=ORDER)
