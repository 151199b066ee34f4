"""Each picker mode's floor: the same wiring with a picker that costs nothing, so a mode's cost splits into what its
integration style costs on this machine (the floor) and what its picker adds (the mode minus its floor).

A floor is a Go server of the mode's transport (``eppkit/floors``, built once: :mod:`eppkit.builds.own_go`) that
answers at once with a fixed pick: for the ext_proc modes (ext_proc, external-epp, gaie-epp) one ext_proc floor
behind the same Envoy configuration (as an EPP of your own: ``external-epp``), deciding where an EPP that reads the
model does (the headers reply waits for the body's end); for the sidecar its own: that ext_proc floor asking a Go
frontend floor (a process of its own) over HTTP for each decision, the sidecar's two hops; for each callout mode
its own filter calling the callout floor (``callout_command``). A mode run with another body path
(eppkit.compare.bodypaths) has its floor with that path (``floor-ext_proc+buffered``).
"""

from __future__ import annotations

from eppkit import modes
from eppkit.builds.own_go import FLOORS
from eppkit.compare import bodypaths, sweep
from eppkit.modes import external_epp
from eppkit.observability.contract import Envoy, Service

PREFIX = "floor-"  # a floor's key among a scenario's modes (and in its files' names)
SIDECAR = "sidecar"  # the mode whose floor has a frontend floor behind its ext_proc floor


def floor_of(mode: str) -> str | None:
    """The key of ``mode``'s floor in a scenario's results ("floor-ext_proc", "floor-lua-callout"), or None."""
    entry = modes.get(mode)
    if Service.CALLOUT in entry.pickers or Service.FRONTEND in entry.pickers:  # a callout filter's, the sidecar's
        return PREFIX + mode
    if entry.picker_call == Envoy.EXT_PROC_CALL:
        return PREFIX + "ext_proc"
    return None  # direct: no picker


def floor_topology(key: str, progress=print) -> tuple[str, dict]:
    """(the mode it runs as, its options) for floor ``key``: the floor binary in the picker's place."""
    binary = FLOORS.build(progress)
    name, path = bodypaths.split(sweep.split(key)[0])
    transport_of = name.removeprefix(PREFIX)
    if transport_of in ("ext_proc", SIDECAR):
        command = f"{binary} -transport extproc -port {{grpc_port}} -pick {{endpoints}} -decide body"
        if transport_of == SIDECAR:
            command += " -frontend"  # the floor asks a frontend floor of its own, as the sidecar's EPP asks its frontend
        if path == bodypaths.DEFAULT:
            return external_epp.MODE.name, {"epp_command": command}
        return external_epp.MODE.name, {"epp_command": f"{command} -body {path}", bodypaths.OPTION: path}
    return transport_of, {"callout_command": f"{binary} -transport callout -port {{port}} -pick {{endpoints}}"}


def is_floor(key: str) -> bool:
    return key.startswith(PREFIX)
