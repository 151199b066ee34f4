"""Each picker mode's floor: the same wiring with a picker that costs nothing, so a mode's cost splits into what its
integration style costs on this machine (the floor) and what its picker adds (the mode minus its floor).

A floor is a Go server of the mode's transport (``eppkit/floors``, built once: :mod:`eppkit.builds.floors`) that
answers at once with a fixed pick: for the ext_proc modes (ext_proc, external-epp, gaie-epp) one ext_proc floor
behind the same Envoy configuration (as an EPP of your own: ``external-epp``); for each callout mode its own filter
calling the callout floor (``callout_command``). An ext_proc mode run with another body path
(eppkit.compare.bodypaths) has the ext_proc floor with that path (``floor-ext_proc+buffered``). The sidecar's floor is the ext_proc one: its frontend hop (the EPP
asking the frontend) is part of what its pickers add.
"""

from __future__ import annotations

from eppkit import modes
from eppkit.builds import floors as floor_build
from eppkit.compare import bodypaths
from eppkit.modes import external_epp
from eppkit.observability.contract import Envoy, Service

PREFIX = "floor-"  # a floor's key among a scenario's modes (and in its files' names)


def floor_of(mode: str) -> str | None:
    """The key of ``mode``'s floor in a scenario's results ("floor-ext_proc", "floor-lua-callout"), or None."""
    entry = modes.get(mode)
    if Service.CALLOUT in entry.pickers:  # the Lua filter's or the dynamic module's own call
        return PREFIX + mode
    if entry.picker_call == Envoy.EXT_PROC_CALL:
        return PREFIX + "ext_proc"
    return None  # direct: no picker


def floor_topology(key: str, progress=print) -> tuple[str, dict]:
    """(the mode it runs as, its options) for floor ``key``: the floor binary in the picker's place."""
    binary = floor_build.build(progress)
    name, path = bodypaths.split(key)
    transport_of = name.removeprefix(PREFIX)
    if transport_of == "ext_proc":
        command = f"{binary} -transport extproc -port {{grpc_port}} -pick {{endpoints}}"
        if path == bodypaths.DEFAULT:
            return external_epp.MODE.name, {"epp_command": command}
        return external_epp.MODE.name, {"epp_command": f"{command} -body {path}", bodypaths.OPTION: path}
    return transport_of, {"callout_command": f"{binary} -transport callout -port {{port}} -pick {{endpoints}}"}


def is_floor(key: str) -> bool:
    return key.startswith(PREFIX)
