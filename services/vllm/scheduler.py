"""Admission: at most ``--max-num-seqs`` requests run; the rest wait in FIFO order.

When ``--max-waiting-queue-length`` requests already wait, a new one is refused (the
server answers 429), as llm-d-inference-sim does.
"""

from __future__ import annotations

import asyncio
from collections import deque


class QueueFull(Exception):
    pass


class Scheduler:
    def __init__(self, max_running: int, max_waiting: int) -> None:
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.running = 0
        self._waiters: deque[asyncio.Future] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.running < self.max_running and not self._waiters:
            self.running += 1
            return
        if len(self._waiters) >= self.max_waiting:
            raise QueueFull(f"waiting queue is full ({self.max_waiting} requests)")
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut  # release() hands its slot over: running is already counted for us
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot arrived just as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes straight to the waiter
                return
        self.running -= 1
