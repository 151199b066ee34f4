"""Ending asyncio tasks that run in the background (a watch, a scrape loop), one way for every service."""

from __future__ import annotations

import asyncio


async def stop_tasks(*tasks: asyncio.Task | None) -> list[Exception]:
    """Cancel ``tasks`` (None: none there) and wait for each to end. What ended one other than the cancel is
    returned, never raised: stopping goes on; the caller says it if it matters."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    ended = []
    for task in live:
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            ended.append(exc)
    return ended
