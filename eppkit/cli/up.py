"""`eppkit up`: start a testbed and keep it running until Ctrl-C."""

from __future__ import annotations

import sys
import time

from eppkit import options
from eppkit.modes import Setup
from eppkit.runtimes import create


def main(args, setup: Setup) -> int:
    """``setup``: the testbed's topology as the command line describes it, checked (eppkit.cli.main)."""
    from eppkit.ui import live as live_ui

    runtime = options.runtime(args)
    # The UI's JVM starts first and gets ready while the testbed starts.
    with live_ui.optional(args.ui) as ui, create(setup, runtime=runtime, cluster=args.cluster) as bed:
        print(f"eppkit up: mode={bed.topology.mode} flow={args.flow} runtime={runtime} "
              f"envoy={bed.envoy_binary.version} backend={bed.topology.backend.label}")
        print(bed.describe())
        if ui is not None:
            print(f"  Trace UI     {ui.attach(bed.jaeger_api_url)}   (every trace, about a second after it ends)")
        print("Try:\n  curl -s {}/v1/chat/completions -H 'content-type: application/json' "
              "-d '{{\"model\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'".format(
                  bed.envoy_url, bed.backends[0].model))
        print("Ctrl-C to stop.", flush=True)
        try:
            while True:
                dead = [n for n, p in bed.processes().items() if not p.is_running()]
                if dead:
                    print(f"component(s) exited: {', '.join(dead)}\n{bed.log_tails(30)}", file=sys.stderr)
                    return 1
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping ...")
    return 0


