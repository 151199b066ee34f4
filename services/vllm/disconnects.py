"""Notice when a client goes away while its request is waiting, and cancel the handler.

aiohttp (3.9+) does not cancel a handler when its client disconnects unless the server
was made with ``handler_cancellation=True``; a handler asleep in prefill would otherwise
run to the end for nobody. One watcher task per app polls the transports of the requests
in flight (every ``interval`` seconds, O(requests) per tick, no per-request timers) and
cancels the handler task of any whose connection has closed. While streaming, a write to
a closed connection fails at once anyway.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

from eppkit.core.tasks import stop_tasks


@dataclass(eq=False)
class Watch:
    request: web.Request
    task: asyncio.Task
    client_gone: bool = False
    shutdown: bool = False
    done: bool = field(default=False)


class DisconnectWatcher:
    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self._watches: set[Watch] = set()
        self._task: asyncio.Task | None = None

    def watch(self, request: web.Request) -> Watch:
        w = Watch(request, asyncio.current_task())
        self._watches.add(w)
        return w

    def unwatch(self, w: Watch) -> None:
        w.done = True
        self._watches.discard(w)

    async def start(self, app: web.Application | None = None) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, app: web.Application | None = None) -> None:
        await stop_tasks(self._task)
        self._task = None

    async def cancel_all(self, app: web.Application | None = None) -> None:
        """On server shutdown: end every request in flight now.

        aiohttp's graceful shutdown would otherwise wait (up to 60 s) for open streams,
        a stalled one included, and a testbed's SIGINT would end in SIGKILL with spans lost.
        """
        for w in list(self._watches):
            w.shutdown = True
            self._watches.discard(w)
            w.task.cancel("server shutting down")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for w in list(self._watches):
                if w.done:
                    continue
                transport = w.request.transport
                if transport is None or transport.is_closing():
                    w.client_gone = True
                    self._watches.discard(w)
                    w.task.cancel("client disconnected")
