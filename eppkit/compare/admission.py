"""Shedding against queueing as a variable of a comparison: in a scenario of priority bands (eppkit.workload.Scenario
.bands, ``saturated``) a mode that can do both runs twice, each in a testbed of its own with the same requests:

- ``shedding`` (the default, the key without a tag): the kit's EPP as GAIE's v1.5.0 admits, a request of a negative
  priority answered 429 while the pool is saturated (services/picker/saturation.py), every other one sent on;
- ``queueing`` (``<run>+queueing``): flow control on, as llm-d-router's ``flowControl`` gate does it
  (services/picker/flow_control.py): while the pool is saturated every request waits in the EPP, the highest band
  first, and one that waits past ``default_request_ttl`` is dropped (429; 503 with no endpoint up).

In such a scenario every mode whose EPP can learn the bands' priorities does: the kit's EPP watches the pool and its
InferenceObjectives in the testbed's control plane (``epp_watch_pool``), as GAIE's does by itself (its queueing: the
mode's ``flow_control`` option, its ``flowControl`` feature gate). A mode that cannot take a setting (no EPP that
watches a control plane: direct, the callouts, the sidecar) runs in the default one only. A key's tags (eppkit.compare.bodypaths) come in this order: ``ext_proc+buffered+queueing``.
"""

from __future__ import annotations

from eppkit import modes
from eppkit.compare.bodypaths import SEP
from eppkit.services.picker.flow_control import DEFAULT_REQUEST_TTL_S
from eppkit.workload import Scenario

SHEDDING, QUEUEING = "shedding", "queueing"
SETTINGS = (SHEDDING, QUEUEING)
DEFAULT = SHEDDING
WATCH = "epp_watch_pool"  # the kit's EPP: its pool and the pool's InferenceObjectives from the control plane


def key(name: str, setting: str) -> str:
    """The key of ``name`` (a mode's run, with its body path's tag) run in ``setting``."""
    return name if setting == DEFAULT else f"{name}{SEP}{setting}"


def split(run_key: str) -> tuple[str, str]:
    """(the run without its setting's tag, the setting) of a run's key (without a sweep's step)."""
    base, sep, tag = run_key.rpartition(SEP)
    return (base, tag) if sep and tag in SETTINGS else (run_key, DEFAULT)


def ttl_s(request_timeout_s: float) -> float:
    """Queueing's request TTL: half the client's request timeout, at most llm-d's 60 s, so a request that waits too
    long is dropped by the EPP (its 429) before the client gives up on it."""
    return min(DEFAULT_REQUEST_TTL_S, request_timeout_s / 2)


def mode_set(mode: str, setting: str) -> dict:
    """The options a run of ``mode`` in ``setting`` adds to its own (a scenario of bands): the kit's EPP reads the
    objectives (GAIE's does by itself), and in ``queueing`` it queues (its TTL: :func:`options_for`)."""
    learns = {WATCH: True} if WATCH in modes.get(mode).option_names else {}
    return {**learns, "flow_control": True} if setting == QUEUEING else learns


def settings(scenario: Scenario) -> tuple[str, ...]:
    """The settings each mode runs in for ``scenario``: both in a scenario of bands, else the default."""
    return SETTINGS if scenario.bands else (DEFAULT,)


def takes(mode: str, setting: str, options: dict) -> bool:
    """Whether ``mode`` with its ``options`` can run in ``setting`` (its options' own say) and learn the bands (its
    EPP watches its pool and the pool's objectives)."""
    entry = modes.get(mode)
    try:
        read = entry.read_options({**options, **mode_set(mode, setting)})
    except (ValueError, TypeError):
        return False
    return entry.watches_pool(read)


def options_for(mode: str, scenario: Scenario, setting: str, options: dict, request_timeout_s: float) -> dict:
    """``options`` (a mode's) as they run in ``setting`` in ``scenario``: with what the setting adds where the mode
    takes it (the default setting in a mode that cannot: as they are)."""
    if not scenario.bands or not takes(mode, setting, options):
        return options
    ttl = {"default_request_ttl": ttl_s(request_timeout_s)} if setting == QUEUEING else {}
    return {**options, **mode_set(mode, setting), **ttl}
