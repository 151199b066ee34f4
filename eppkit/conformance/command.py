"""`eppkit conformance` as a command: its options read into a target, the suite run per Envoy version, the report
written, the exit code (eppkit.conformance's docstring says what each means)."""

from __future__ import annotations

import argparse
import sys
import time

from eppkit import options as opt
from eppkit.conformance import report as rp
from eppkit.conformance.budget import Budget, CostBudget
from eppkit.conformance.suite import CONFORMS, FAILS, NOT_LOADED, WARNINGS, base_verdict, run, selected
from eppkit.conformance.target import PluginTarget, Target
from eppkit.core.paths import reports_dir
from eppkit.modes import external_epp
from eppkit.modes.options import parse_set

# Exit codes: the EPP conforms (warnings allowed), a must check failed (with --strict, any), the suite could not
# run, no verdict (a partial run that failed nothing, or a must check that could not be judged).
EXIT_CONFORMS, EXIT_FAILS, EXIT_CANNOT_RUN, EXIT_NO_VERDICT = 0, 1, 2, 3


def target_from(args: argparse.Namespace) -> Target | PluginTarget:
    """The subject the command line names (its flags: eppkit.options, command conformance): with ``--plugin`` your
    filters, else the EPP (your filters, if any, in its testbeds)."""
    filters = tuple(args.filters or ())
    if args.plugin:
        return PluginTarget(filters=filters, mode=args.mode or "direct", options=parse_set(args.options),
                            rewrites=frozenset(args.plugin_rewrites or ()),
                            let_through=tuple(args.plugin_let_through or ())).validate()
    for flag, given in (("--plugin-rewrites", args.plugin_rewrites), ("--plugin-let-through", args.plugin_let_through)):
        if given:
            raise ValueError(f"{flag} is for --plugin (a verdict on your filters)")
    epp = opt.epp_options(args)
    mode = args.mode or (external_epp.MODE.name if epp else "ext_proc")
    return Target(mode=mode, options={**parse_set(args.options), **epp}, shed_header=args.shed_header or None,
                  cache_aware=args.cache_aware, load_aware=args.load_aware, lora_affinity=args.lora_affinity,
                  saturation=args.saturation, pd=args.pd, filters=filters, flow_control=args.flow_control,
                  flow_control_ttl=args.flow_control_ttl,
                  flow_control_drop_status=args.flow_control_drop_status).validate()


def envoy_versions(value: str | None) -> list[str | None]:
    """``--envoy-version``: none (the Envoy installed with eppkit), one, a comma list, or ``all``: the newest cached
    release of every Envoy minor line (1.36 ... 1.40), the installed one included."""
    from eppkit.gateway import versions as envoy

    if not value:
        return [None]
    if value != "all":
        return [envoy.check_version_string(v) for v in value.split(",") if v.strip()]
    found = {b.version: b for b in envoy.cached()}
    installed = envoy.installed_with_eppkit()
    if installed is not None:
        found[installed.version] = installed
    newest: dict[tuple[int, int], str] = {}
    for version in sorted(found, key=lambda v: (envoy.release(v), v)):
        newest[envoy.release(version)[:2]] = version
    if len(newest) < 2:
        raise ValueError("--envoy-version all: fewer than two Envoy releases are cached; run "
                         "`eppkit bootstrap --envoy-version all` first")
    return list(newest.values())


def exit_code(report: dict) -> int:
    verdict = base_verdict(report["verdict"])  # the soak left out as asked (--quick): the verdict all the same
    return EXIT_FAILS if verdict in (FAILS, NOT_LOADED) else EXIT_CONFORMS if verdict in (CONFORMS, WARNINGS) \
        else EXIT_NO_VERDICT


def main(args: argparse.Namespace) -> int:
    from eppkit.components.controlplane import SharedControlPlane
    from eppkit.runtimes import create, create_jaeger
    from eppkit.runtimes.testbed import new_run_dir

    try:
        target = target_from(args)
        checks = selected(args.checks, kind=target.kind) if args.checks else None
        budget = (CostBudget if target.kind == "plugin" else Budget).parse(args.budget) if args.budget else None
        versions = envoy_versions(args.envoy_version)
        runtime = opt.runtime(args)
    except ValueError as exc:
        print(f"eppkit conformance: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    out = args.out or reports_dir() / time.strftime("conformance-%Y%m%d-%H%M%S")
    count = len(checks) if checks is not None else len(selected(kind=target.kind))
    on = f" on Envoy {', '.join(v for v in versions if v)}" if versions != [None] else ""
    what = f"the plugin {target.label}, floor: {target.floor_label}" if target.kind == "plugin" else target.label
    print(f"eppkit conformance: {count} checks against {what} ({runtime}{on}); report in {out}",
          flush=True)
    beds = []

    def make_bed(topology):
        bed = create(topology, runtime=runtime, cluster=args.cluster, jaeger=jaeger, control_plane=plane)
        beds.append(bed)
        return bed.start()

    def progress(message: str) -> None:  # a long check's (the soak's), among the results as they come
        print(f"  … {message}", flush=True)

    def show(check, result):
        print(f"  {rp.SYMBOL[result.status]} {check.name:<24} {result.status}"
              + (f": {result.message}" if result.status != "pass" else ""), flush=True)

    reports = []
    # One Jaeger, and one control plane (started by the first testbed whose EPP watches a pool), for every testbed.
    with create_jaeger(runtime, new_run_dir("jaeger-conformance"), cluster=args.cluster) as jaeger, \
            SharedControlPlane(lambda: new_run_dir("control-plane")) as plane:
        if any(c.control_plane and not c.not_declared(target) for c in checks or selected(kind=target.kind)):
            plane.start_beside()  # a declared check's testbed watches a pool: the control plane starts meanwhile
        for i, version in enumerate(versions):
            if version is not None and len(versions) > 1:
                print(f"-- Envoy {version} --", flush=True)
            try:  # the soak once in a version matrix, on its first Envoy
                reports.append(run(target.replace(envoy_version=version), make_bed, checks=checks,
                                   runtime=runtime, on_result=show, request_timeout_s=args.request_timeout_s,
                                   budget=budget, strict=args.strict, quick=args.quick,
                                   soak_judged_on=versions[0] if i else None, progress=progress))
            finally:
                while beds:
                    beds.pop().stop()
    report = reports[0] if len(reports) == 1 else rp.matrix(reports)
    paths = rp.write(report, out)
    print(rp.text(report))
    print(f"report: {paths['html']}\nJUnit: {paths['junit']}\nnumbers: {paths['json']}")
    return exit_code(report)
