"""The mock's LoRA adapters, as vLLM serves them: ``--lora-modules name=path ...`` and ``--max-loras N``.

Each adapter is a model of its own (``/v1/models`` lists it with ``parent`` the base model; a request whose
``model`` names it is served by it). The path is never read. At most ``--max-loras`` adapters are loaded at once
(vLLM's GPU slots, default 1); a request for one that is not loaded loads it on demand when a slot is free, else in
place of the least recently used adapter no request is running on; when every loaded adapter has requests running,
it waits (``waiting_lora_adapters``) until one is idle. Loading takes no time. What ``vllm:lora_requests_info``
shows (:mod:`eppkit.services.openai_server.lora_info`) is vLLM's view: the adapters of running requests and of
waiting ones, not the idle loaded ones.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, OrderedDict

from eppkit.services.openai_server.lora_info import LoraInfo

DEFAULT_MAX_LORAS = 1  # vLLM's --max-loras default


def parse_modules(items: list[str]) -> dict[str, str]:
    """``--lora-modules`` items (``name=path``, or vLLM's JSON ``{"name": ..., "path": ...}``) -> {name: path}."""
    modules: dict[str, str] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                spec = json.loads(item)
                name, path = spec["name"], spec["path"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"--lora-modules item {item!r} is not name=path") from None
        else:
            name, sep, path = item.partition("=")
            if not sep:
                raise ValueError(f"--lora-modules item {item!r} is not name=path")
        if not isinstance(name, str) or not name.strip() or not isinstance(path, str) or not path.strip():
            raise ValueError(f"--lora-modules item {item!r} is not name=path")
        if name.strip() in modules:
            raise ValueError(f"--lora-modules names {name.strip()!r} twice")
        modules[name.strip()] = path.strip()
    return modules


class LoraAdapters:
    """One pod's adapters: which are loaded (least recently used first), and the requests running and waiting on
    each. Requests take an adapter with :meth:`use`."""

    def __init__(self, modules: dict[str, str], max_loras: int = DEFAULT_MAX_LORAS) -> None:
        self.paths = dict(modules)
        self.max_loras = max_loras
        self.loaded: OrderedDict[str, None] = OrderedDict()
        self.running: Counter[str] = Counter()
        self.waiting: Counter[str] = Counter()
        self.loads = 0  # adapters loaded, evictions included
        self.evictions = 0
        self.blocked = 0  # requests waiting for a slot (vLLM counts them in num_requests_waiting)
        self._pinned: Counter[str] = Counter()  # requests holding each loaded adapter (waiting for a slot or running)
        self._waiters: list[asyncio.Future] = []

    def serves(self, model: str) -> bool:
        return model in self.paths

    def use(self, model: str) -> LoraUse | None:
        """One request's use of ``model``'s adapter (counted waiting at once), or None for a model that is none."""
        return LoraUse(self, model) if model in self.paths else None


    def info(self) -> LoraInfo:
        """What ``vllm:lora_requests_info`` says now (vLLM's view: running and waiting adapters, and max_lora)."""
        return LoraInfo(running=tuple(sorted(self.running)), waiting=tuple(sorted(self.waiting)),
                        max_lora=self.max_loras if self.paths else 0)

    def _load(self, name: str) -> bool:
        """Make ``name`` loaded (most recently used) if it is or can be; False when every slot is held by another
        adapter with requests on it."""
        if name in self.loaded:
            self.loaded.move_to_end(name)
            return True
        if len(self.loaded) >= self.max_loras:
            idle = next((n for n in self.loaded if not self._pinned[n]), None)
            if idle is None:
                return False
            del self.loaded[idle]
            self.evictions += 1
        self.loaded[name] = None
        self.loads += 1
        return True

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class LoraUse:
    """A request on an adapter: waiting (counted at once) -> :meth:`load` (waits for a slot, then holds the adapter
    loaded) -> :meth:`run` (it runs) -> :meth:`close` (always; gives back what it holds)."""

    def __init__(self, adapters: LoraAdapters, name: str) -> None:
        self.adapters, self.name = adapters, name
        self.state = "waiting"
        adapters.waiting[name] += 1

    async def load(self) -> None:
        a = self.adapters
        while not a._load(self.name):
            fut = asyncio.get_running_loop().create_future()
            a._waiters.append(fut)
            a.blocked += 1
            try:
                await fut
            finally:
                a.blocked -= 1
        a._pinned[self.name] += 1
        self.state = "loaded"

    def run(self) -> None:
        a = self.adapters
        _drop(a.waiting, self.name)
        a.running[self.name] += 1
        self.state = "running"

    def close(self) -> None:
        a = self.adapters
        if self.state == "closed":
            return
        _drop(a.running if self.state == "running" else a.waiting, self.name)
        if self.state in ("loaded", "running"):
            _drop(a._pinned, self.name)
            if self.name in a.loaded:
                a.loaded.move_to_end(self.name)  # its last use
        self.state = "closed"
        a._wake()


def _drop(counter: Counter[str], name: str) -> None:
    counter[name] -= 1
    if counter[name] <= 0:
        del counter[name]
