"""``python -m eppkit.cluster.supervisor HOME``: runs one cluster's daemons (:class:`eppkit.cluster.node.Node`) until
SIGTERM or SIGINT, then stops them all. Started by ``eppkit cluster up`` in a mount namespace of its own
(``unshare --mount --propagation slave``), in a session of its own and without the test session's tag, so it outlives
the command or pytest session that started it and no leak check takes it for a leak. Its daemons die with it
(PR_SET_PDEATHSIG); every mount it made goes with its namespace.

It writes HOME/state.json: ``{"ready": true, ...}`` once the node is Ready, or ``{"failed": "..."}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from eppkit.cluster.configs import Layout
from eppkit.cluster.node import Node
from eppkit.core.progress import printer

say = printer(stdout=True)  # its stdout is HOME/supervisor.log


def _write(layout: Layout, state: dict) -> None:
    tmp = layout.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(layout.state)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    layout = Layout(Path(argv[0]))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    node = Node(layout, progress=say)
    try:
        node.start()
    except BaseException as exc:  # noqa: BLE001 - said in the state file, which `eppkit cluster up` reads
        _write(layout, {"failed": f"{type(exc).__name__}: {exc}"[-3000:], "supervisor": os.getpid()})
        return 1
    _write(layout, {"ready": True, "start_s": round(time.monotonic() - started, 3), **node.state()})
    say(f"cluster ready in {time.monotonic() - started:.2f} s: {node.phases}")
    while not stop.wait(1.0):
        dead = [p.name for p in node.processes().values() if not p.is_running()]
        if dead:
            say(f"{', '.join(dead)} exited: stopping the cluster")
            break
    say("stopping")
    node.stop()
    layout.state.unlink(missing_ok=True)
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
