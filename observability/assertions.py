"""Assertions that say what they mean about a trace: order, containment, duration, presence.

Every failure message ends with the text waterfall of the whole trace so the reader
sees what actually happened.

    from eppkit.observability.contract import Vllm

    check = TraceCheck(trace)
    prefill = check.one(Vllm.PREFILL)
    check.before(prefill, check.one(Vllm.DECODE))
    check.duration(prefill, expected_ms=300, tolerance_ms=30)

Span names are the trace contract's (observability/contract.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from eppkit.observability import contract_check, waterfall
from eppkit.observability import expected_spans as ex
from eppkit.observability.expected_spans import SpanRule
from eppkit.observability.trace_model import Span, SpanNotFound, Trace


class TraceAssertionError(AssertionError):
    pass


@dataclass(frozen=True)
class RequestPath:
    """The spans of one served request every mode has (``call`` and ``decision``: None in direct)."""

    root: Span  # the client's request
    ingress: Span  # Envoy's downstream span
    call: Span | None  # Envoy's span of the call to the picker
    decision: Span | None  # the picker's decision span
    upstream: Span  # Envoy's upstream attempt
    backend: Span  # the first span of whoever served it (llm_request, pd.request)


class TraceCheck:
    def __init__(self, trace: Trace):
        self.trace = trace

    def fail(self, message: str) -> None:
        raise TraceAssertionError(f"{message}\n\n{waterfall.render(self.trace)}")

    # -- lookup -----------------------------------------------------------------------
    def one(self, name: str | None = None, service: str | None = None, **attrs: Any) -> Span:
        try:
            return self.trace.one(name, service, **attrs)
        except SpanNotFound as exc:
            self.fail(str(exc))
            raise  # unreachable; keeps type checkers happy

    def all(self, name: str | None = None, service: str | None = None, **attrs: Any) -> list[Span]:
        return self.trace.find_all(name, service, **attrs)

    def one_of(self, rule: SpanRule) -> Span:
        found = rule.find(self.trace)
        if len(found) != 1:
            self.fail(f"expected exactly one {rule.label} span, found {len(found)}")
        return found[0]

    # -- the request path ------------------------------------------------------------------------
    def request_path(self, mode: ex.ModeSpans) -> RequestPath:
        """The path of a served request in ``mode`` (its registry entry, eppkit.modes.Mode; the public
        ``eppkit.TraceCheck`` also takes its name), its places checked, its spans returned.

        The client's span is the only root; Envoy's ingress is its child; the picker call (picker
        modes) is a child of ingress and holds the decision, which ends before the upstream attempt
        starts; the upstream attempt is a child of ingress and the backend's span a child of it.
        """
        root = self.one_of(ex.ROOT)
        ingress, upstream = self.one_of(ex.INGRESS), self.one_of(ex.UPSTREAM)
        self.single_root(root)
        self.child_of(ingress, root)
        self.child_of(upstream, ingress)
        if len(upstream.children) != 1:
            self.fail(f"expected one backend span under {upstream.label}, found {[s.label for s in upstream.children]}")
        backend = upstream.children[0]
        call = decision = None
        call_rule, decision_rule = ex.picker_call(mode), ex.decision(mode)
        if call_rule is not None:
            call = self.one_of(call_rule)
            self.child_of(call, ingress)
        if call is not None and decision_rule is not None:
            decision = self.one_of(decision_rule)
            self.descendant_of(decision, call)
            self.before(decision, upstream)
        return RequestPath(root, ingress, call, decision, upstream, backend)

    # -- presence -----------------------------------------------------------------------
    def present_once(self, expected: Iterable[SpanRule | tuple[str, str] | str]) -> None:
        """Every span (a contract span name, a ``(service, name)`` pair or a rule) appears exactly once."""
        problems = []
        for rule in map(SpanRule.of, expected):
            n = len(rule.find(self.trace))
            if n != 1:
                problems.append(f"{rule.label} x{n}")
        if problems:
            self.fail("expected each step exactly once; wrong counts: " + ", ".join(problems))

    def follows_contract(self, also: Iterable[str | tuple] = ()) -> None:
        """Every span, attribute and event of the trace is one the trace contract declares for it
        (eppkit.observability.contract), or one of ``also``: spans of your own, each ``"service:name"`` or
        ``(service, name)`` (any attributes) or ``(service, name, [attribute, ...])`` (only those)."""
        declared: dict[tuple[str, str], set[str] | None] = {}
        for item in also:
            if isinstance(item, str):
                service, _, name = item.partition(":")
                declared[(service, name)] = None
            else:
                declared[(item[0], item[1])] = set(item[2]) if len(item) > 2 else None
        problems = []
        for s in self.trace.spans:
            if (s.service, s.name) in declared:
                allowed = declared[(s.service, s.name)]
                problems += [f"span '{s.service}:{s.name}': attribute {k!r} is not one you declared for it"
                             for k in s.attributes if allowed is not None and k not in allowed]
                continue
            problems += contract_check.violations(s.name, s.attributes, {e.name: e.attributes for e in s.events},
                                            service=s.service)
        if problems:
            self.fail("the trace breaks the trace contract (eppkit.observability.contract; declare spans of your own "
                      "with follows_contract(also=[\"service:name\"])):\n" + "\n".join(problems))

    def absent(self, name: str, service: str | None = None) -> None:
        found = self.trace.find_all(name, service)
        if found:
            self.fail(f"expected no {service or '*'}:{name} span, found {len(found)}")

    # -- order and structure ---------------------------------------------------------------
    def before(self, a: Span, b: Span, slack_ms: float = 0.0) -> None:
        """``a`` ends before ``b`` starts (``slack_ms`` forgives clock rounding across processes)."""
        if a.end_us > b.start_us + slack_ms * 1000:
            self.fail(
                f"expected {a.label} to end before {b.label} starts, but it ended "
                f"{(a.end_us - b.start_us) / 1000:.2f} ms after"
            )

    def event_before(self, a_time_us: int, a_label: str, b: Span, slack_ms: float = 0.0) -> None:
        if a_time_us > b.start_us + slack_ms * 1000:
            self.fail(f"expected {a_label} before {b.label} starts; it came {(a_time_us - b.start_us) / 1000:.2f} ms after")

    def in_order(self, spans: list[Span], slack_ms: float = 0.0) -> None:
        for a, b in zip(spans, spans[1:]):
            self.before(a, b, slack_ms)

    def within(self, child: Span, parent: Span, slack_ms: float = 0.5) -> None:
        """``child`` starts and ends inside ``parent``."""
        slack = slack_ms * 1000
        if child.start_us + slack < parent.start_us or child.end_us > parent.end_us + slack:
            self.fail(f"expected {child.label} within {parent.label}")

    def child_of(self, child: Span, parent: Span) -> None:
        if child.parent is not parent:
            actual = child.parent.label if child.parent else "no parent (a root)"
            self.fail(f"expected {child.label} to be a direct child of {parent.label}; its parent is {actual}")

    def descendant_of(self, child: Span, ancestor: Span) -> None:
        if not child.is_descendant_of(ancestor):
            chain = " < ".join(a.label for a in child.ancestors()) or "no parent"
            self.fail(f"expected {child.label} under {ancestor.label}; its ancestors are: {chain}")

    def single_root(self, root: Span) -> None:
        others = [s.label for s in self.trace.roots if s is not root]
        if others:
            self.fail(f"expected {root.label} to be the only root; also roots: {', '.join(others)}")

    # -- timing ---------------------------------------------------------------------------------
    def duration(self, span: Span, expected_ms: float, tolerance_ms: float) -> None:
        if abs(span.duration_ms - expected_ms) > tolerance_ms:
            self.fail(
                f"expected {span.label} to last {expected_ms:.1f} ± {tolerance_ms:.1f} ms, "
                f"it lasted {span.duration_ms:.1f} ms"
            )

    def attribute(self, span: Span, key: str, expected: Any) -> None:
        actual = span.attributes.get(key, "<missing>")
        if actual != expected:
            self.fail(f"expected {span.label} attribute {key}={expected!r}, got {actual!r}")
