"""Waiting for something to become true: one helper for every wait in the kit and its tests.

    trace = poll(lambda: jaeger.get_trace(trace_id), until=lambda t: t is not None,
                 timeout_s=10, describe=f"trace {trace_id} in Jaeger")

``fn`` is called at once and then every ``interval_s`` until ``until(value)`` holds, and that
value is returned. At the deadline :class:`PollTimeout` says what was awaited, for how long, and
what the last attempt gave (or raised, for exceptions listed in ``retry_on``).
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class PollTimeout(AssertionError):
    """The awaited condition did not hold before the deadline (an AssertionError, so tests read it as a failure)."""


def poll(fn: Callable[[], T], until: Callable[[T], object] = bool, *, timeout_s: float, interval_s: float = 0.05,
         describe: str | Callable[[T | None, BaseException | None], str] = "the condition",
         retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """``fn()`` until ``until`` accepts its value; that value, or :class:`PollTimeout` after ``timeout_s``.

    ``describe``: what is awaited (for the error), or a function of the last value and the last
    exception (``None`` each when there was none) that writes the whole message.
    ``retry_on``: exceptions of ``fn`` that mean "not yet" (e.g. a connection refused while a
    server starts); any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = fn()
            if until(value):
                return value
        except retry_on as exc:
            error = exc
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if callable(describe):
                raise PollTimeout(describe(value, error)) from error
            last = f"{type(error).__name__}: {error}" if error is not None else repr(value)
            raise PollTimeout(f"{describe}: not reached within {timeout_s:g} s (last: {last[:500]})") from error
        time.sleep(min(interval_s, remaining))
