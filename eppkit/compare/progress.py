"""The comparison's progress on the terminal: one updating line per mode, or a line every few seconds in a log."""

from __future__ import annotations

import io
import sys
import threading
import time


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


class _Quiet(ProgressLine):
    def __init__(self):
        super().__init__(stream=io.StringIO())
