"""`eppkit conformance`: a verdict on an EPP, judged from the kit's real Envoy.

The checks (eppkit.conformance.checks) run against any EPP the kit can host — its own (``--mode ext_proc``,
``sidecar``), yours (``--epp-command`` or ``--epp-address``), GAIE's (``--mode gaie-epp``) — on testbeds of
three mock pods, and judge from Envoy's side: the data plane (the gateway follows the pick, fallbacks
included; the served endpoint is reported; the subset hint; 503 and 429; GAIE's test header; fail-open;
several ports per pod), the ext_proc protocol (reply order, streamed body mutations, end_of_stream, bodies
byte for byte, a request without a body, response phases, one destination, the health services, concurrent
streams) and tracing (the EPP's spans join Envoy's trace). The report says, per check, pass / fail / n/a /
not run, the evidence (Envoy's access-log line, its stats, what reached the backend, the trace) and the
rule's source, with the EPP hop phase by phase; it is written as report.json (schema eppkit.conformance/1),
report.xml (JUnit) and report.html. Exit codes: 0 the EPP conforms, 1 a check failed, 2 the suite could not
run (a bad option, a testbed that does not start).

    eppkit conformance --epp-command "python -m my_epp --port {grpc_port} --pool {named_endpoints}"
    eppkit conformance --mode gaie-epp

In pytest: :func:`eppkit.conformance.testing.conformance_tests` (one test per check).
"""

from __future__ import annotations

import argparse
import sys
import time

from eppkit import options as opt
from eppkit.conformance import report as rp
from eppkit.conformance.suite import SCHEMA, run, selected
from eppkit.conformance.target import EPP_MODES, Target
from eppkit.core.paths import reports_dir
from eppkit.modes import external_epp
from eppkit.modes.options import parse_set

__all__ = ["EPP_MODES", "SCHEMA", "Target", "main", "run", "selected", "target_from"]
EXIT_CONFORMS, EXIT_FAILS, EXIT_CANNOT_RUN = 0, 1, 2


def target_from(args: argparse.Namespace) -> Target:
    """The EPP the command line names (its flags: eppkit.options, command conformance)."""
    epp = opt.epp_options(args)
    mode = args.mode or (external_epp.MODE.name if epp else "ext_proc")
    return Target(mode=mode, options={**parse_set(args.options), **epp}, shed_header=args.shed_header or None).validate()


def main(args: argparse.Namespace) -> int:
    from eppkit.components.controlplane import SharedControlPlane
    from eppkit.runtimes import create, create_jaeger
    from eppkit.runtimes.local import new_run_dir

    try:
        target = target_from(args)
        checks = selected(args.checks)
    except ValueError as exc:
        print(f"eppkit conformance: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    out = args.out or reports_dir() / time.strftime("conformance-%Y%m%d-%H%M%S")
    print(f"eppkit conformance: {len(checks)} checks against {target.label} ({args.runtime}); report in {out}",
          flush=True)
    beds = []

    def make_bed(topology):
        bed = create(topology, runtime=args.runtime, jaeger=jaeger, control_plane=plane)
        beds.append(bed)
        return bed.start()

    def show(check, result):
        print(f"  {rp.SYMBOL[result.status]} {check.name:<24} {result.status}"
              + (f": {result.message}" if result.status != "pass" else ""), flush=True)

    # One Jaeger, and one control plane (started by the first testbed whose EPP watches a pool), for every testbed.
    with create_jaeger(args.runtime, new_run_dir("jaeger-conformance")) as jaeger, \
            SharedControlPlane(lambda: new_run_dir("control-plane")) as plane:
        try:
            report = run(target, make_bed, checks=checks, runtime=args.runtime, on_result=show,
                         request_timeout_s=args.request_timeout_s)
        finally:
            for bed in beds:
                bed.stop()
    paths = rp.write(report, out)
    print(rp.text(report))
    print(f"report: {paths['html']}\nJUnit: {paths['junit']}\nnumbers: {paths['json']}")
    return EXIT_CONFORMS if report["verdict"] == "conforms" else EXIT_FAILS
