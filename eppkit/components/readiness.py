"""Readiness as strategy objects: each one knows what "ready" means for one component.

A strategy is checked against a running :class:`~eppkit.components.process.ManagedProcess`; when
its deadline passes, :class:`ReadinessTimeout` tells the story: whether the process is
still alive, the last lines of its log, and a hint.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import requests

if TYPE_CHECKING:
    from eppkit.components.process import ManagedProcess


class ReadinessTimeout(RuntimeError):
    pass


class WaitStrategy(Protocol):
    timeout_s: float
    poll_interval_s: float

    def describe(self) -> str: ...

    def is_ready(self, process: "ManagedProcess") -> bool: ...


@dataclass
class HttpReady:
    """Ready when GET ``url`` answers ``status`` (and, if given, the body contains ``body_contains``)."""

    url: str
    status: int = 200
    body_contains: str | None = None
    timeout_s: float = 30.0
    poll_interval_s: float = 0.05

    def describe(self) -> str:
        return f"GET {self.url} -> {self.status}"

    def is_ready(self, process: "ManagedProcess") -> bool:
        try:
            resp = requests.get(self.url, timeout=1.0)
        except requests.RequestException:
            return False
        if resp.status_code != self.status:
            return False
        return self.body_contains is None or self.body_contains in resp.text


@dataclass
class TcpReady:
    """Ready when ``host:port`` accepts a TCP connection (for gRPC servers)."""

    host: str
    port: int
    timeout_s: float = 30.0
    poll_interval_s: float = 0.05

    def describe(self) -> str:
        return f"TCP connect {self.host}:{self.port}"

    def is_ready(self, process: "ManagedProcess") -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False


@dataclass
class GrpcHealthReady:
    """Ready when ``grpc.health.v1.Health/Check`` on ``host:port`` answers SERVING (an upstream EPP:
    its gRPC ports accept connections before its pool is synced)."""

    host: str
    port: int
    service: str = ""
    timeout_s: float = 60.0
    poll_interval_s: float = 0.1

    def describe(self) -> str:
        return f"gRPC health {self.host}:{self.port} SERVING"

    def is_ready(self, process: "ManagedProcess") -> bool:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            with grpc.insecure_channel(f"{self.host}:{self.port}") as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=self.service), timeout=1.0)
        except grpc.RpcError:
            return False
        return answer.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class ApiServerReady:
    """Ready when a kube-apiserver's ``/readyz`` answers 200 over TLS (its CA, a bearer token).

    ``exclude``: checks left out. The kit leaves out the PriorityClass post-start hook: it sleeps 1 s
    before its first try (``wait.Poll``) and nothing the kit runs uses PriorityClasses."""

    url: str  # https://127.0.0.1:PORT
    ca_file: str
    token: str
    exclude: tuple[str, ...] = ()
    timeout_s: float = 60.0
    poll_interval_s: float = 0.05

    def describe(self) -> str:
        return f"GET {self.url}/readyz -> 200"

    def is_ready(self, process: "ManagedProcess") -> bool:
        query = "&".join(f"exclude={check}" for check in self.exclude)
        session = requests.Session()
        session.trust_env = False  # loopback: never through a proxy the environment names
        try:
            resp = session.get(f"{self.url}/readyz" + (f"?{query}" if query else ""), verify=self.ca_file,
                               headers={"Authorization": f"Bearer {self.token}"}, timeout=1.0)
        except requests.RequestException:
            return False
        finally:
            session.close()
        return resp.status_code == 200


@dataclass
class LogLineReady:
    """Ready when the process's log contains a line matching ``pattern``."""

    pattern: str
    timeout_s: float = 30.0
    poll_interval_s: float = 0.05

    def describe(self) -> str:
        return f"log line /{self.pattern}/"

    def is_ready(self, process: "ManagedProcess") -> bool:
        return re.search(self.pattern, process.read_log()) is not None


@dataclass
class AllReady:
    """Ready when every strategy is, checked in order (the deadline is the largest of theirs)."""

    strategies: tuple[WaitStrategy, ...]
    poll_interval_s: float = 0.05

    @property
    def timeout_s(self) -> float:
        return max(s.timeout_s for s in self.strategies)

    def describe(self) -> str:
        return " and ".join(s.describe() for s in self.strategies)

    def is_ready(self, process: "ManagedProcess") -> bool:
        return all(s.is_ready(process) for s in self.strategies)


def wait_until_ready(process: "ManagedProcess", strategy: WaitStrategy, hint: str = "") -> None:
    deadline = time.monotonic() + strategy.timeout_s
    while True:
        if strategy.is_ready(process):
            return
        exited = process.returncode()
        if exited is not None:
            raise ReadinessTimeout(
                f"{process.name} exited with code {exited} before it was ready ({strategy.describe()}).\n"
                f"--- last lines of {process.log_path} ---\n{process.log_tail(20)}\n"
                + (f"Hint: {hint}" if hint else "")
            )
        if time.monotonic() >= deadline:
            raise ReadinessTimeout(
                f"{process.name} not ready after {strategy.timeout_s:.0f}s ({strategy.describe()}); "
                f"process is still running (pid {process.pid}).\n"
                f"--- last lines of {process.log_path} ---\n{process.log_tail(20)}\n"
                + (f"Hint: {hint}" if hint else "Hint: read the whole log above; raise the timeout if the machine is busy.")
            )
        time.sleep(strategy.poll_interval_s)
