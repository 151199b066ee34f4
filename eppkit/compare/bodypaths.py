"""The request body's path as a variable of a comparison: a mode whose EPP speaks ext_proc runs once per way Envoy
sends it the request body (eppkit.services.epp.REQUEST_BODY: streamed, buffered, none; ``--body-paths``), where the
mode takes it, each beside its own floor, so a report shows what streaming the body through the EPP costs.

A run's key among a scenario's results: the mode's name, then a ``+<tag>`` for each variable of the run not at its
default: the body path (``ext_proc+buffered``; the default, streamed, has none), then shedding or queueing
(``ext_proc+buffered+queueing``: eppkit.compare.admission); its floor's likewise (``floor-ext_proc+buffered``)."""

from __future__ import annotations

from dataclasses import fields

from eppkit import modes
from eppkit.modes.options import read_options
from eppkit.services.epp import BODY_PATHS

SEP = "+"
OPTION = "epp_request_body"  # the ext_proc modes' option (eppkit.modes.ext_proc.EnvoyExtProcOptions)
DEFAULT = BODY_PATHS[0]


def key(name: str, path: str) -> str:
    """The key of ``name`` (a mode, or a floor's key) run with the body sent as ``path``."""
    return name if path == DEFAULT else f"{name}{SEP}{path}"


def split(run_key: str) -> tuple[str, str]:
    """(the mode or floor, the body path) of a run's key (without a sweep's step), whatever other tags it has."""
    name, _, tags = run_key.partition(SEP)
    return name, next((tag for tag in tags.split(SEP) if tag in BODY_PATHS), DEFAULT)


def applies(mode: str) -> bool:
    """Whether ``mode`` sends the request body to an EPP over ext_proc (its options have :data:`OPTION`)."""
    return OPTION in {f.name for f in fields(modes.get(mode).options)}


def takes(mode: str, path: str, mode_set: dict) -> bool:
    """Whether ``mode``, with its options ``mode_set``, can have the body sent as ``path`` (its options' own say)."""
    if path == DEFAULT:
        return True
    if not applies(mode):
        return False
    entry = modes.get(mode)
    try:
        options = read_options(entry.options, {**mode_set, OPTION: path}, mode)
        options.validate()
    except (ValueError, TypeError):
        return False
    return True
