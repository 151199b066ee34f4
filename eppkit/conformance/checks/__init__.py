"""The EPP's checks: one module per kind (protocol, sustained load, responses, saturation, data plane, routing,
latency, tracing, P/D, flow control), each check one function with one decorator,
:func:`eppkit.conformance.registry.check` (a check of this package judges an EPP:
:data:`~eppkit.conformance.registry.CHECKS`).
Adding a check is one decorated function in one of these modules, plus the broken EPP that fails it
(``python -m eppkit.services.echo_epp --misbehave``) in tests/e2e/test_conformance_suite.py.
"""

from __future__ import annotations

from eppkit.conformance.registry import CHECKS, Check
from eppkit.conformance.results import STATUSES, Result
from eppkit.core.registry import load_members

__all__ = ["CHECKS", "STATUSES", "Check", "Result"]


# The order the report lists the modules' checks in, each module's in the order it declares them; a module added
# later is listed last. How they run is the scheduler's (eppkit.conformance.schedule), from what each check declares:
# the protocol's checks come first because every other check needs them, a check on a testbed of its own starts as
# soon as its needs are judged and runs beside the others, a timed one (the latency budget) waits for those.
ORDER = ("protocol", "sustained", "responses", "saturation", "data_plane", "routing", "latency", "tracing")


load_members(__name__, __path__, group="checks", skip=("registry",), order=ORDER)
