"""`eppkit conformance`: a verdict on an EPP, judged from the kit's real Envoy.

The checks (eppkit.conformance.checks) run against any EPP the kit can host — its own (``--mode ext_proc``,
``sidecar``), yours (``--epp-command`` or ``--epp-address``), GAIE's (``--mode gaie-epp``) — on testbeds of
three mock pods, with an HTTP/1.1 and an HTTP/2 (h2c) client each, and judge from Envoy's side: the ext_proc
protocol (reply order, streamed body mutations, end_of_stream, a request without a body, every request served,
bodies byte for byte written whole and in paced pieces, trailers, a cancelled request, one destination, the
health services, concurrent streams), sustained load (2,000 requests through one EPP process: none lost, no
slow-down, no growth of its memory or threads), the response path (the response whole, the decision's metadata stable,
framing left to Envoy), the data plane (the gateway follows the pick, fallbacks included; the served endpoint
is reported; the subset hint; 503 and 429; GAIE's test header; fail-open; several ports per pod), a latency
budget and tracing. No check passes without a witness: a request that failed for another cause leaves its check
not run, with that cause in Envoy's words (:mod:`eppkit.conformance.witness`). The report says, per check, pass /
fail / n/a / not run, its level (a failed *must* does not conform; a failed *should* is a warning, or a failure
with ``--strict``), the evidence (Envoy's access-log line, its stats, its warnings, the EPP's log, what reached
the backend, the trace) and the rule's source, with the EPP hop phase by phase; it is written as report.json
(schema eppkit.conformance/2), report.xml (JUnit) and report.html; ``--envoy-version all`` judges on every cached
Envoy release line, one report with a column per version. Exit codes: 0 the EPP conforms (warnings allowed), 1 a
must check failed, 2 the suite could not run (a bad option, a testbed that does not start), 3 no verdict (a
partial ``--check`` run that failed nothing, or a must check that could not be judged).

    eppkit conformance --epp-command "python -m my_epp --port {grpc_port} --pool {named_endpoints}"
    eppkit conformance --mode gaie-epp

In pytest: :func:`eppkit.conformance.testing.conformance_tests` (one test per check).

With ``--plugin`` the subject is your filters (:class:`~eppkit.conformance.target.PluginTarget`), judged by the plugin
checks (:mod:`eppkit.conformance.plugin_checks`, a registry of their own) against the same testbed without them, in
the same run; the same levels, witnesses, reports and exit codes (docs/bring-your-own-plugin.md, Judging your plugin).

    eppkit conformance --plugin --lua-filter my_guard.lua
"""

from __future__ import annotations

from typing import Any

__all__ = ["EPP_MODES", "SCHEMA", "Target", "main", "run", "selected", "target_from"]
# Where each name lives: the package loads them when asked (the option table reads eppkit.conformance.target
# without loading the checks, gRPC and the report).
_WHERE = {"EPP_MODES": "target", "Target": "target", "SCHEMA": "suite", "run": "suite", "selected": "suite",
          "main": "command", "target_from": "command"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
