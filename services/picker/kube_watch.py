"""Kubernetes objects kept as the picker knows them, one way for its pool (:mod:`.kube_pool`) and its
InferenceObjectives (:mod:`.saturation`): each kind listed once, then watched from that list's resourceVersion
(lightkube's watch, which reconnects on errors and starts again from the current state on 410 Gone). The owner
says what an object means to it; the lists, the watch tasks, the client and its end are here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from eppkit.core.tasks import stop_tasks

Handle = Callable[[str, Any], None]  # (event: ADDED / MODIFIED / DELETED, object) -> None


def get(obj: Any, *path: str) -> Any:
    """``obj.a.b`` or ``obj["a"]["b"]`` (lightkube's models and generic resources' dicts), None when absent."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def keep(objects: dict[str, Any], event: str, obj: Any) -> None:
    """``objects`` (name -> object) as ``event`` leaves them."""
    name = get(obj, "metadata", "name")
    if event == "DELETED":
        objects.pop(name, None)
    else:
        objects[name] = obj


def http_status(exc: Exception) -> int | None:
    """The HTTP status a list failed with: lightkube's ApiError's, or the HTTP client's own for an answer without
    a Status (a 404 for a kind the cluster does not serve); None when there was no answer."""
    return getattr(getattr(exc, "status", None), "code", None) or getattr(
        getattr(exc, "response", None), "status_code", None)


class ListThenWatch:
    """One client of the cluster in ``kubeconfig``, in ``namespace``: :meth:`list` each kind (every object handed to
    its handle as ``ADDED``), then :meth:`watch` them all from their lists' resourceVersions, calling the kind's
    handle and then ``changed`` on every event, until :meth:`stop`."""

    def __init__(self, kubeconfig: str, namespace: str, changed: Callable[[], None]) -> None:
        self.kubeconfig, self.namespace, self.changed = kubeconfig, namespace, changed
        self._client = None
        self._listed: list[tuple[str, tuple[Any, str, Handle, dict[str, Any]]]] = []  # (task, what it watches)
        self._tasks: list[asyncio.Task] = []

    async def list(self, kind: Any, handle: Handle, task: str, **selectors: Any) -> None:
        """Every object of ``kind`` (lightkube's ``list`` ``selectors``) handed to ``handle``; watched from this list
        by :meth:`watch` (in a task named ``task``). Raises what lightkube raises (:func:`http_status` reads it)."""
        if self._client is None:
            from lightkube import AsyncClient, KubeConfig

            self._client = AsyncClient(KubeConfig.from_file(self.kubeconfig), namespace=self.namespace,
                                       trust_env=False)
        listed = self._client.list(kind, **selectors)
        async for obj in listed:
            handle("ADDED", obj)
        self._listed.append((task, (kind, listed.resourceVersion, handle, selectors)))

    def watch(self) -> None:
        """Watch every kind listed, each from its list's resourceVersion."""
        self._tasks += [asyncio.create_task(self._watch(*what), name=task) for task, what in self._listed]
        self._listed = []

    async def _watch(self, kind: Any, resource_version: str, handle: Handle, selectors: dict[str, Any]) -> None:
        from lightkube.types import on_error_retry

        async for event, obj in self._client.watch(kind, resource_version=resource_version, on_error=on_error_retry,
                                                   **selectors):
            handle(event, obj)
            self.changed()

    async def stop(self) -> list[Exception]:
        """End the watches and the client; what had ended a watch is returned, never raised (stopping goes on)."""
        ended = await stop_tasks(*self._tasks)
        self._tasks = []
        if self._client is not None:
            await self._client.close()
        return ended
