"""The vllm preset's servers, started once and shared by every testbed of a session (one pool per session Jaeger).

A real vLLM takes 30-90 s to start on a busy 2-core machine and 3.7 GB of memory, so a testbed of the
``vllm`` backend does not start its own: :class:`ServerPool` starts a server the first time a topology needs
one — pod *i*'s name, model and seed — and hands the testbed the running servers (``Backend.running``). A later
topology that needs the same pods reuses them; one that needs other pods (another model name) gets those
started, and servers beyond :data:`MAX_SERVERS` that it does not use are stopped first. Each server exports its
spans to the session's Jaeger of its runtime, so there is one pool per runtime. Pod *i* listens on its own
loopback address (127.0.0.2, 127.0.0.3, ...) on one port shared by the pool, as pods of an InferencePool do,
so every mode can use it (gaie-epp's EPP reads pod addresses).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import TYPE_CHECKING

from eppkit.pytest_plugin.state import require

if TYPE_CHECKING:
    from eppkit.components.process import ManagedProcess
    from eppkit.topology import Topology

MAX_SERVERS = 2  # two cores, 3.7 GB each: more would only slow each other down


@dataclasses.dataclass(frozen=True)
class _Key:
    """What a server is started with: a topology's pod reuses a server only when all of it is the same."""

    index: int
    name: str
    model: str
    seed: int
    extra: tuple[str, ...]
    command: str


class ServerPool:
    """The preset's servers of one session runtime, exporting to ``otlp_endpoint``; stopped by :meth:`stop`."""

    def __init__(self, otlp_endpoint: str) -> None:
        from eppkit.components.ports import PortAllocator
        from eppkit.flows._servers import pod_hosts

        self.otlp_endpoint = otlp_endpoint
        self.hosts = pod_hosts(MAX_SERVERS)
        self.port = PortAllocator().shared_port(self.hosts)
        self._servers: dict[_Key, ManagedProcess] = {}
        self._lock = threading.Lock()
        self._run_dir = None

    def backend_for(self, topology: "Topology"):
        """``topology.backend`` with ``running`` set to its pods' servers, started now if need be (a skip
        naming why when the topology needs more servers than the pool runs)."""
        import pytest

        from eppkit.backends import real_vllm

        backend = topology.backend
        if not backend.command:
            try:
                real_vllm.require()
            except FileNotFoundError as exc:
                require(False, str(exc))  # a skip on a laptop, a failure in CI
        if len(topology.vllm) > MAX_SERVERS:
            pytest.skip(f"the session's {real_vllm.NAME} servers are at most {MAX_SERVERS} "
                        f"({real_vllm.SERVER_GB} GB and a core each); this topology has {len(topology.vllm)} pods")
        keys = [_Key(i, spec.name, spec.model, topology.seed, tuple(spec.extra_args), backend.command)
                for i, spec in enumerate(topology.vllm)]
        with self._lock:
            self._start(keys)
        running = tuple(f"{k.name}=http://{self.hosts[k.index]}:{self.port}@{k.model}" for k in keys)
        return dataclasses.replace(backend, running=running)

    def _start(self, keys: list[_Key]) -> None:
        from eppkit.backends import real_vllm
        from eppkit.components.process import ManagedProcess
        from eppkit.components.readiness import HttpReady

        for key, proc in list(self._servers.items()):  # a dead one, or one in a place another pod needs
            if not proc.is_running() or (key not in keys and any(k.index == key.index for k in keys)):
                proc.stop()
                del self._servers[key]
        started = []
        for key in keys:
            if key in self._servers:
                continue
            host = self.hosts[key.index]
            argv = real_vllm.command(host=host, port=self.port, model=key.model, seed=key.seed, own=key.command,
                                     extra=list(key.extra))
            argv += ["--otlp-traces-endpoint", f"http://{self.otlp_endpoint}"]
            log = self._folder() / f"{key.name}-{key.model}-{len(self._servers)}.log"
            proc = ManagedProcess(key.name, argv, log).with_env(**real_vllm.env(key.name, key.index,
                                                                                own=bool(key.command)))
            sys.stderr.write(f"\neppkit: starting the session's vLLM {key.name} ({key.model}) on {host}:{self.port}; "
                             f"log {log}\n")
            self._servers[key] = proc.with_cwd(self._folder()).start()
            started.append((key, proc))
        try:
            for key, proc in started:
                proc.wait_ready(HttpReady(f"http://{self.hosts[key.index]}:{self.port}{real_vllm.READY_PATH}",
                                          timeout_s=real_vllm.START_TIMEOUT_S),
                                hint=f"read {proc.log_path}; `{' '.join(proc.argv)}` starts it by hand")
        except BaseException:  # none of this start stays half-up
            for key, proc in started:
                proc.stop()
                self._servers.pop(key, None)
            raise

    def _folder(self):
        if self._run_dir is None:
            from eppkit.runtimes.local import new_run_dir

            self._run_dir = new_run_dir("vllm-servers")
        return self._run_dir

    def stop(self) -> None:
        with self._lock:
            for proc in self._servers.values():
                proc.stop()
            self._servers.clear()
