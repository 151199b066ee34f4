"""Progress on the terminal, printed one way by the whole kit: a line a message, flushed at once so that it shows while
the work runs, on stderr (never mixed into a command's output) unless the command's output is its progress
(``stdout=True``: `eppkit bootstrap`, `eppkit cluster`); ``[part]`` in front when the part is named. A long run of
many steps (`eppkit compare`) has one updating line instead: :class:`ProgressLine`."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable

Progress = Callable[[str], object]  # what a long step is handed to say how it goes


def say(message: str) -> None:
    """The kit's progress printer: ``message`` as a line on stderr, at once."""
    print(message, file=sys.stderr, flush=True)


def printer(part: str = "", *, stdout: bool = False) -> Progress:
    """A progress printer whose lines say ``[part]`` first (``stdout``: on stdout, a command whose output it is)."""
    prefix = f"[{part}] " if part else ""

    def out(message: str) -> None:
        print(prefix + message, file=sys.stdout if stdout else sys.stderr, flush=True)

    return out


class ProgressLine:
    """One updating line per mode on a terminal; elsewhere (CI logs) a line every few seconds.

    Hand-written rather than tqdm: one line with our own fields, no extra dependency.
    """

    def __init__(self, stream=None, every_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every_s = every_s
        self._last_len = 0
        self._last_print = 0.0
        self._lock = threading.Lock()  # workers report progress from their own threads

    def update(self, text: str) -> None:
        with self._lock:
            self._update(text)

    def _update(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self._last_len))
            self._last_len = len(text)
            self.stream.flush()
        elif time.monotonic() - self._last_print >= self.every_s:
            self._last_print = time.monotonic()
            print(text, file=self.stream, flush=True)

    def done(self, text: str) -> None:
        with self._lock:
            self._done(text)

    def _done(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self._last_len) + "\n")
            self._last_len = 0
        else:
            print(text, file=self.stream)
        self._last_print = 0.0
        self.stream.flush()

    def message(self, text: str) -> None:
        if self.tty and self._last_len:
            self.stream.write("\n")
            self._last_len = 0
        print(text, file=self.stream, flush=True)


class QuietLine(ProgressLine):
    """A ProgressLine that shows nothing (a run nobody watches)."""

    def __init__(self):
        super().__init__(stream=io.StringIO())
