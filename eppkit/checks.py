"""The public :class:`TraceCheck`: the trace assertions of :mod:`eppkit.observability.assertions`, with a
mode given by its name as well as by its registry entry (``request_path("ext_proc")``)."""

from __future__ import annotations

from eppkit import modes
from eppkit.observability import assertions
from eppkit.observability.assertions import RequestPath, TraceAssertionError
from eppkit.observability.expected_spans import ModeSpans

__all__ = ["RequestPath", "TraceAssertionError", "TraceCheck"]


class TraceCheck(assertions.TraceCheck):
    def request_path(self, mode: str | ModeSpans) -> RequestPath:
        """The path of a served request in ``mode`` (a name such as ``"ext_proc"``, or a testbed's
        ``bed.mode``, which carries what its topology adds, such as an EPP's declared decision span):
        the client's span the only root, Envoy's ingress its child, the picker call (picker modes) a child
        of ingress holding the decision, which ends before the upstream attempt starts."""
        return super().request_path(modes.get(mode) if isinstance(mode, str) else mode)
