"""What a command's option values mean, read once: the runtimes ``--runtime`` names, the backend they name, the
request headers (``-H``), an EPP of your own's options and the :class:`~eppkit.topology.Topology` they describe
(eppkit up / run / conformance)."""

from __future__ import annotations

import argparse
from typing import Any

from eppkit import backends as _backends
from eppkit import runtimes as _runtimes
from eppkit.modes import external_epp
from eppkit.modes.options import parse_set
from eppkit.services.vllm.config import latency_from_args
from eppkit.topology import Topology, VllmSpec


def runtimes_named(value: str) -> tuple[str, ...]:
    """``--runtime`` (and ``--eppkit-runtime``, its ini key): where testbeds run, a runtime or a comma list of them,
    ``all`` being every runtime that is one of it (not a cluster's, which is named); each once, in the order given.
    The option's one parser (its ``type``); ArgumentTypeError naming the runtimes there are."""
    chosen: list[str] = []
    for part in (p.strip() for p in str(value).split(",")):
        for name in (_runtimes.ALL_RUNTIMES if part == "all" else (part,) if part else ()):
            if name not in _runtimes.RUNTIMES:
                raise argparse.ArgumentTypeError(
                    f"unknown runtime {name!r}: choose from {', '.join(_runtimes.RUNTIMES)}, all, or a comma list")
            if name not in chosen:
                chosen.append(name)
    if not chosen:
        raise argparse.ArgumentTypeError(f"no runtime named: choose from {', '.join(_runtimes.RUNTIMES)}, all")
    return tuple(chosen)


def runtime(values: Any) -> str:
    """The runtime a command's testbeds run on: the one ``--runtime`` names (ValueError when it names several: a
    command starts its testbeds on one; the pytest plugin is the front end that runs tests on each)."""
    named = values.runtime
    if len(named) != 1:
        raise ValueError(f"--runtime {','.join(named)}: a command's testbeds run on one runtime; name one")
    return named[0]


def backend(values: Any) -> _backends.Backend:
    """The backend the ``--backend*`` options name (the kit's mock by default)."""
    return _backends.Backend(preset=values.backend, urls=tuple(values.backend_urls),
                             prefill_urls=tuple(values.prefill_urls), decode_urls=tuple(values.decode_urls),
                             spans=values.backend_spans, command=values.vllm_command)


def request_headers(values: Any) -> dict[str, str]:
    """``-H 'name: value'`` (eppkit run) as a dict; ValueError for one without a colon."""
    out: dict[str, str] = {}
    for item in values.headers:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"-H {item!r}: give 'name: value'")
        out[name.strip()] = value.strip()
    return out


def epp_options(values: Any) -> dict[str, Any]:
    """The external-epp mode options ``--epp-command`` / ``--epp-image`` / ``--epp-address`` /
    ``--epp-decision-span`` set."""
    return {k: v for k, v in (("epp_command", values.epp_command), ("epp_image", values.epp_image),
                              ("epp_address", values.epp_address), ("decision_span", values.epp_decision_span)) if v}


def topology(values: Any) -> Topology:
    """The Topology a command's values describe (eppkit up / run / conformance); ValueError on a bad one.
    What the command does not offer keeps Topology's default."""
    options = parse_set(values.options)
    epp = epp_options(values)
    mode = values.mode or (external_epp.MODE.name if epp else "direct")
    if epp and mode != external_epp.MODE.name:
        raise ValueError(f"--epp-command / --epp-address need --mode {external_epp.MODE.name} (got --mode {mode})")
    given = {name: getattr(values, name) for name in ("flow", "seed", "prefill", "decode", "encoders", "encode_latency")
             if hasattr(values, name)}
    if hasattr(values, "backends"):
        given["vllm"] = [VllmSpec(name=f"vllm-{i}") for i in range(values.backends)]
    if hasattr(values, "time_to_first_token"):
        given["latency"] = latency_from_args(values)
    return Topology(mode=mode, options={**options, **epp}, backend=backend(values),
                    filters=list(getattr(values, "filters", None) or []), envoy_version=values.envoy_version, **given)
