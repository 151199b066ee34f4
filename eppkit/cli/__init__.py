"""The `eppkit` command: doctor, bootstrap, up, run, compare, conformance, cluster. Its flags come from one table
(eppkit.options); `cluster`'s own two are eppkit.cli.cluster's."""

from __future__ import annotations

import argparse
import signal
import sys

from eppkit import modes, options
from eppkit.backends import BackendMissing
from eppkit.builds.controlplane import ControlPlaneBuildError
from eppkit.builds.dynmod import DynmodBuildError
from eppkit.builds.own_go import OwnGoBuildError
from eppkit.cluster import ClusterError
from eppkit.cluster.apipod import ApiPodError
from eppkit.components.controlplane import ControlPlaneError
from eppkit.components.readiness import ReadinessTimeout
from eppkit.core.settings import SettingsError, settings
from eppkit.gateway.config import EnvoyConfigInvalid
from eppkit.gateway.user_filters import UserFilterError
from eppkit.gateway.versions import EnvoyFeatureMissing, EnvoyVersionError

# What a user can get wrong before anything runs (a plugin, an Envoy version): one message, no traceback.
# A component that does not start tells which, its log's last lines and a hint (ReadinessTimeout); so does a
# control plane that cannot be built or started, or refuses what the testbed asks of it.
# The kubernetes runtime's cluster that is missing, refuses the kit's user or cannot run what is asked: said too.
USER_ERRORS = (UserFilterError, EnvoyVersionError, EnvoyFeatureMissing, EnvoyConfigInvalid, DynmodBuildError,
               OwnGoBuildError, ReadinessTimeout, ControlPlaneBuildError, ControlPlaneError, BackendMissing,
               ClusterError, ApiPodError)
COMMANDS = {
    "doctor": "check every prerequisite",
    "bootstrap": "build what PyPI does not ship and `eppkit compare` needs (Jaeger, the dynamic module; --all: GAIE's "
                 "EPP, etcd and kube-apiserver too, else built on first use); cached",
    "up": "start a testbed and keep it running until Ctrl-C",
    "run": "start a testbed, send one traced request, print its waterfall",
    "compare": "drive a seeded workload through every mode; report each step's cost from the traces",
    "conformance": "judge an EPP from Envoy's side: data plane, ext_proc protocol, tracing; a versioned report",
    "cluster": "start, stop or show the one-node Kubernetes cluster (`up`, `down`, `status`)",
}


def _raise_interrupt(signum, frame):  # SIGTERM gets the same clean teardown as Ctrl-C
    raise KeyboardInterrupt


def parser() -> argparse.ArgumentParser:
    """The whole command line: each command's flags from the options table."""
    p = argparse.ArgumentParser(prog="eppkit", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for command, help_text in COMMANDS.items():
        extra = {"formatter_class": argparse.RawDescriptionHelpFormatter}
        if command in ("compare", "conformance"):
            extra["description"] = _doc(command)
        command_parser = sub.add_parser(command, help=help_text, **extra)
        if command == "cluster":
            from eppkit.cli import cluster

            cluster.add_arguments(command_parser)
        else:
            options.add_arguments(command_parser, command)
    return p


def _doc(command: str) -> str | None:
    """A command's description: its module's doc (None before `eppkit bootstrap`: the module imports the
    testbed, and with it OTel's exporter, whose protos may still be broken)."""
    try:
        if command == "compare":
            from eppkit.compare import __doc__ as doc
        else:
            from eppkit.conformance import __doc__ as doc
    except ImportError:
        return None
    return doc


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        settings()  # every EPPKIT_* variable, read once now: one the kit cannot use is told here, by its name
    except SettingsError as exc:
        p.error(str(exc))
    setup = None  # up's and run's topology, read and checked once here and handed to the command
    if args.command in ("up", "run"):
        try:  # a flow the mode cannot run, or an option it does not know, is a usage error
            setup = modes.check(options.topology(args))
        except ValueError as exc:
            p.error(str(exc))

    if getattr(args, "kubeconfig", None) or getattr(args, "image_registry", None):  # the cluster runtime's cluster:
        # one handle, made here and passed down (args.cluster) to the runtime, its launcher and its Pods
        from eppkit import runtimes
        from eppkit.cluster import handle

        clusters = [r.name for r in runtimes.all_runtimes() if r.capabilities.cluster]
        if not set(args.runtime) <= set(clusters):
            p.error(f"--kubeconfig and --image-registry are the {' or '.join(clusters)} runtime's cluster: add "
                    f"--runtime {clusters[0]} (not {','.join(args.runtime)})")
        try:
            args.cluster = handle.named(args.kubeconfig, args.image_registry)
        except ValueError as exc:
            p.error(str(exc))

    if getattr(args, "runtime", None) is not None:  # a runtime that cannot run here says how to get it
        from eppkit import runtimes

        try:
            runtime = options.runtime(args)  # a command's testbeds run on one
        except ValueError as exc:
            p.error(str(exc))
        usable, how = runtimes.get(runtime, args.cluster).available()
        if not usable:
            print(f"eppkit {args.command}: the {runtime} runtime cannot run here: {how}", file=sys.stderr)
            return 2

    signal.signal(signal.SIGTERM, _raise_interrupt)
    # A shell that starts us in the background sets SIGINT to "ignore"; we want Ctrl-C semantics always.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.command == "doctor":
        from eppkit.cli import doctor

        return doctor.main()
    if args.command == "bootstrap":
        from eppkit.cli import bootstrap

        return bootstrap.main(ui=args.ui, envoy_versions=args.envoy_version, backends=args.backend,
                              load_tools=args.load_tool, all_builds=args.all_builds, kubernetes=args.kubernetes)
    if args.command == "cluster":
        from eppkit.cli import cluster

        return cluster.main(args)
    try:
        command = _load(args.command)  # a command imports most of what it uses when it runs
        return command(args) if setup is None else command(args, setup)
    except ImportError as exc:
        if "opentelemetry.proto" not in str(exc):
            raise
        # On a fresh install xds-protos may have overwritten opentelemetry-proto's files, so the OTLP
        # protos fail to import; bootstrap and doctor exist to repair and report that.
        print(f"eppkit: cannot import the testbed ({exc}).\n"
              "Hint: run 'eppkit bootstrap' (it repairs the xds-protos / opentelemetry-proto clash), "
              "then 'eppkit doctor'.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except USER_ERRORS as exc:
        print(f"eppkit {args.command}: {exc}", file=sys.stderr)
        return 2


def _load(command: str):
    """The command's main, imported only when it runs (the testbed's imports load OTel's protos)."""
    if command == "up":
        from eppkit.cli.up import main as run_main
    elif command == "run":
        from eppkit.cli.run import main as run_main
    elif command == "conformance":
        from eppkit.conformance import main as run_main
    else:
        from eppkit.compare import main as run_main
    return run_main


if __name__ == "__main__":
    sys.exit(main())
