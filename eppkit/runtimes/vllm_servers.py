"""The vllm preset's servers, started once and shared by many testbeds (a pytest session's, a comparison's modes).

A real vLLM takes 30-90 s to start on a busy 2-core machine and 3.7 GB of memory, so a testbed of the
``vllm`` backend need not start its own: :class:`ServerPool` starts a server the first time a topology needs
one — pod *i*'s name, model and seed — and hands the testbed the running servers (``Backend.running``). A later
topology that needs the same pods reuses them. One whose pod *i* has another name, seed or flags gets a new
server in its place. One whose pod *i* only serves another model name gets the server restarted serving that
name as well (vLLM's ``--served-model-name`` takes several; its answers name the first): one restart per new
name, not one per change (measured: a restart costs 40-110 s). Each server exports its spans to one Jaeger
(a pytest session has one per runtime, so one pool per runtime). Pod *i* listens on its own loopback address
(127.0.0.2, 127.0.0.3, ...) on one port shared by the pool, as pods of an InferencePool do, so every mode can
use it (gaie-epp's EPP reads pod addresses). The pytest plugin's ``eppkit_vllm_servers`` and ``eppkit compare
--backend vllm`` use it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from eppkit.backends import real_vllm
from eppkit.components.ports import PortAllocator
from eppkit.components.inference_pool import pod_address
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady
from eppkit.core import procfs

if TYPE_CHECKING:
    from eppkit.backends import Backend
    from eppkit.topology import Topology

MAX_SERVERS = 2  # two cores, 3.7 GB each: more would only slow each other down


class TooManyPods(ValueError):
    """A topology needs more servers than the pool runs."""


@dataclasses.dataclass(frozen=True)
class _Key:
    """What a server is started with, but its model names: a pod reuses the server at its place only when all
    of it is the same."""

    index: int
    name: str
    seed: int
    extra: tuple[str, ...]
    command: str


@dataclasses.dataclass
class _Server:
    key: _Key
    models: tuple[str, ...]
    process: "ManagedProcess"
    kv_events: str | None = None  # where it publishes its KV-cache events (the kit's install: always)


class ServerPool:
    """The preset's servers exporting to ``otlp_endpoint`` (one Jaeger), logs in ``run_dir``; stopped by :meth:`stop`
    (each by its whole process group) or at the end of a ``with``."""

    def __init__(self, otlp_endpoint: str, run_dir=None) -> None:
        self.otlp_endpoint = otlp_endpoint
        self.hosts = [pod_address(i) for i in range(MAX_SERVERS)]
        self.port = PortAllocator().shared_port(self.hosts)
        self._servers: dict[int, _Server] = {}  # by place
        self._lock = threading.Lock()
        self._run_dir = run_dir
        self._starts = 0

    def backend_for(self, topology: "Topology") -> "Backend":
        """``topology.backend`` with ``running`` set to its pods' servers, started now if need be.
        FileNotFoundError when the preset is not installed (saying how to install it); TooManyPods when the
        topology needs more servers than the pool runs."""
        backend = topology.backend
        if not backend.command:
            real_vllm.require()
        if len(topology.vllm) > MAX_SERVERS:
            raise TooManyPods(f"the shared {real_vllm.NAME} servers are at most {MAX_SERVERS} "
                              f"({real_vllm.SERVER_GB} GB and a core each); this topology has {len(topology.vllm)} pods")
        wanted = [(_Key(i, spec.name, topology.seed, tuple(spec.extra_args), backend.command), spec.model)
                  for i, spec in enumerate(topology.vllm)]
        with self._lock:
            self._start(wanted)
        running = tuple(f"{key.name}=http://{self.hosts[key.index]}:{self.port}@{model}" for key, model in wanted)
        return dataclasses.replace(backend, running=running)

    def _start(self, wanted: list[tuple[_Key, str]]) -> None:
        started = []
        for key, model in wanted:
            server = self._servers.get(key.index)
            if server is not None and server.process.is_running() and server.key == key and model in server.models:
                continue
            models = (*server.models, model) if server is not None and server.key == key else (model,)
            if server is not None:
                server.process.stop()
                del self._servers[key.index]
            host = self.hosts[key.index]
            extra, kv_events = list(key.extra), None
            if not key.command:  # the kit's install publishes its KV-cache events (vLLM binds only a wildcard)
                events_port = PortAllocator().port(all_interfaces=True)
                kv_events = f"tcp://{host}:{events_port}"
                extra += ["--kv-events-config", real_vllm.kv_events_config(events_port, f"kv@{key.name}@{models[0]}")]
            argv = real_vllm.command(host=host, port=self.port, model=models, seed=key.seed, own=key.command,
                                     extra=extra)
            argv += ["--otlp-traces-endpoint", f"http://{self.otlp_endpoint}"]
            self._starts += 1
            log = self._folder() / f"{key.name}-{self._starts}.log"
            env = real_vllm.env(key.name, key.index, own=bool(key.command))
            sys.stderr.write(f"\neppkit: starting vLLM {key.name} (serving {', '.join(models)}) on {host}:{self.port}, "
                             f"shared by the testbeds after it; log {log}\n")
            process = ManagedProcess(key.name, argv, log).with_env(**env).with_cwd(self._folder()).start()
            self._servers[key.index] = _Server(key, models, process, kv_events)
            started.append(self._servers[key.index])
        try:
            for server in started:
                server.process.wait_ready(
                    HttpReady(f"http://{self.hosts[server.key.index]}:{self.port}{real_vllm.READY_PATH}",
                              timeout_s=real_vllm.START_TIMEOUT_S),
                    hint=f"read {server.process.log_path}; `{' '.join(server.process.argv)}` starts it by hand")
        except BaseException:  # none of this start stays half-up
            for server in started:
                server.process.stop()
                self._servers.pop(server.key.index, None)
            raise

    def process(self, name: str) -> "ManagedProcess":
        """The running server of the pod ``name`` (its API server; the rest of it is in its process group)."""
        server = next((s for s in self._servers.values() if s.key.name == name), None)
        if server is None:
            raise KeyError(f"no vLLM server of pod {name!r} runs in this session; running: "
                           f"{', '.join(s.key.name for s in self._servers.values()) or 'none'}")
        return server.process

    def kv_events(self, name: str) -> str | None:
        """Where the pod ``name``'s server publishes its KV-cache events (``tcp://host:port``); None for a command
        of yours."""
        return next(s.kv_events for s in self._servers.values() if s.key.name == name)

    def kill(self, name: str) -> None:
        """SIGKILL the pod's whole server (its process group), as a pod dies; the next topology that needs it
        gets it started again."""
        self.process(name).kill()

    def kill_engine(self, name: str) -> int:
        """SIGKILL the pod's engine process alone (vLLM's ``EngineCore``), as an engine crash: its API server
        then answers in-band errors and exits by itself. The engine's pid."""
        server = self.process(name)
        engines = [pid for pid in procfs.group_members(server.pid) if (procfs.name(pid) or "").startswith("VLLM::EngineCor")]
        if not engines:
            raise RuntimeError(f"pod {name}'s vLLM (pid {server.pid}) has no EngineCore process")
        os.kill(engines[0], signal.SIGKILL)
        return engines[0]

    def _folder(self):
        if self._run_dir is None:
            from eppkit.runtimes.testbed import new_run_dir

            self._run_dir = new_run_dir("vllm-servers")
        return self._run_dir

    def __enter__(self) -> "ServerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.process.stop()
            self._servers.clear()

