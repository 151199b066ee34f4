"""Where the checks' vocabulary was first: it lives in :mod:`eppkit.conformance.registry` (a check, its needs and
resources, the registries) and :mod:`eppkit.conformance.results` (what a check finds) now; an import of it from here
still works."""

from __future__ import annotations

from eppkit.conformance.registry import (  # noqa: F401
    AUDIT,
    CHECKS,
    CONTROL_PLANE,
    MAY_TAKE_DOWN,
    ONE_RUN,
    OWN_TESTBED,
    PLUGIN_CHECKS,
    SERVED,
    SOAK,
    TIMED,
    Check,
    check,
    declared_by,
)
from eppkit.conformance.results import (  # noqa: F401
    DATA_PLANE,
    ENVOY_EXT_PROC,
    FAIL,
    GAIE_CONFORMANCE,
    LATENCY,
    LOAD,
    MUST,
    NOT_APPLICABLE,
    NOT_RUN,
    PASS,
    PROTOCOL,
    PROTOCOL_DOC,
    SHOULD,
    STATUSES,
    TRACING,
    Result,
    evidence_of,
    failed,
    judged,
    not_applicable,
    passed,
)
