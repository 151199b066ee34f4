"""Pod roles of a disaggregated pool, as llm-d names them: the pod label ``llm-d.ai/role`` is ``prefill``,
``decode`` or ``both``. llm-d's EPP picks the request's destination among decode-capable pods (``decode``,
``both``, or no label) and names a prefill-capable one (``prefill``, ``both``) in ``x-prefiller-host-port`` for
the decode pod's sidecar. A pool without prefill-only pods is aggregated: nobody is named.

A pool's roles are written ``ip:port=role,...`` (the ``{pod_roles}`` placeholder of an EPP's command, the echo
EPP's ``--pod-roles``); the kit's pickers read a role from their pool's ``name=ip:port#role``
(:mod:`eppkit.services.picker.endpoints`).
"""

from __future__ import annotations

from typing import Iterable

LABEL = "llm-d.ai/role"
PREFILL, DECODE, BOTH = "prefill", "decode", "both"
ROLES = (PREFILL, DECODE, BOTH)


def decode_capable(role: str | None) -> bool:
    """A pod that may be a request's destination: ``decode``, ``both``, or unlabelled (llm-d's decode filter)."""
    return role in (DECODE, BOTH, None, "")


def prefill_capable(role: str | None) -> bool:
    """A pod that may be named to prefill: ``prefill`` or ``both`` (llm-d's own prefill filter takes ``prefill``
    only; a ``both`` pod prefills as well)."""
    return role in (PREFILL, BOTH)


def disaggregated(roles: Iterable[str | None]) -> bool:
    """The pool holds prefill-only pods: a request's prefill goes to one of them."""
    return PREFILL in set(roles)


def check(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"{LABEL} {role!r}: one of {', '.join(ROLES)}")
    return role


def parse_roles(spec: str) -> dict[str, str]:
    """``"127.0.0.1:8001=prefill,127.0.0.1:8002=decode"`` -> {address: role}; ValueError on a bad item."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        address, sep, role = item.rpartition("=")
        if not sep or ":" not in address:
            raise ValueError(f"pod role {item!r} is not ip:port=role")
        out[address.strip()] = check(role.strip())
    return out


def format_roles(endpoints: Iterable) -> str:
    """Each endpoint's ``address=role`` (``.address``, ``.role``; unlabelled: ``both``), as :func:`parse_roles`
    reads it."""
    return ",".join(f"{ep.address}={getattr(ep, 'role', '') or BOTH}" for ep in endpoints)
