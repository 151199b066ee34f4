"""Shared pieces of the reliability tests (faults, bad input, load).

- ``TRAITS``: what each integration mode is made of (who picks, Envoy's span names), so a
  test can be one table over the modes instead of five copies.
- Faults: :func:`frozen` (a hung component: SIGSTOP, or ``docker pause``), :func:`kill` and
  :func:`restart` of a component, :class:`Stream` (a streaming request that the test can
  abandon or watch break mid-answer, as the traced root span of its own trace), :class:`HangUp`
  (a request abandoned before any byte of the answer, e.g. during prefill).
- Checks: :func:`assert_openai_error`, :func:`assert_kit_healthy`, :func:`counter`.
- Memory: :func:`rss_bytes` (a process and its children, from ``/proc/<pid>/status``; for a
  container, its init's host pid and everything under it).
- Load: :func:`run_load`, a bounded run through :class:`eppkit.workload.Driver` (the driver
  ``eppkit compare`` uses), with injected failures, trace completeness and RSS samples.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import requests
from eppkit.observability import expected_spans
from eppkit.observability.contract import Client, Eppkit, Http, ResourceAttributes, Service, Vllm
from eppkit.services.vllm.config import MockLatency
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from eppkit import modes
from eppkit.builds import gaie as gaie_build
from eppkit.core import procfs
from eppkit.core.polling import poll
from eppkit.pytest_plugin.state import require
from eppkit.topology import Topology, VllmSpec
from eppkit.workload import SCENARIOS, Driver, Load, plan_requests
from tests.support import kit

MODEL = "mock-llm"
MODES = modes.kit_names()  # direct, ext_proc, sidecar, lua-callout, dynmod-callout
PICKER_MODES = tuple(m.name for m in modes.all_modes() if m.pickers and not m.external)  # the kit's pickers
# Every mode with a picker, EPPs of your own included (topology() gives each what it needs to start).
EPP_PROTOCOL_MODES = tuple(m.name for m in modes.all_modes() if m.pickers)
# external-epp in the tests: the kit's own EPP, started as a command like any EPP of your own.
KIT_EPP_COMMAND = (f"{sys.executable} -m eppkit.services.epp --host 127.0.0.1 --port {{grpc_port}} "
                   "--endpoints {named_endpoints} --metrics-interval 0.2")
# What each integration mode is made of (who picks, Envoy's span names, health awareness): the mode
# registry's entries (eppkit.modes.Mode: pickers, picker, picker_span, picker_call, upstream,
# fallback_upstream, health_aware), so a test can be one table over the modes instead of five copies.
TRAITS = {m.name: m for m in modes.all_modes()}


def require_gaie_epp() -> None:
    """The gaie-epp mode builds the GAIE EPP with Go: skip without Go (a laptop), fail in CI."""
    require(gaie_build.find() is not None or shutil.which("go") is not None, gaie_build.go_missing_message())


def chat_body(content: str = "Which pod am I on?", **extra) -> dict:
    return {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": content}], **extra}


def topology(mode: str, *, flow: str = "aggregated", vllm: tuple[str, ...] = ("vllm-0", "vllm-1"),
             vllm_args: tuple[str, ...] = (), ttft_ms: float = 20.0, itl_ms: float = 5.0, **options) -> Topology:
    """A small testbed for ``mode``: fast mocks; pickers that see load and health quickly."""
    if mode in ("ext_proc", "sidecar"):
        options.setdefault("metrics_interval", 0.2)
    if mode == "ext_proc":
        options.setdefault("scorer", "round-robin")
    if mode == "external-epp":
        options.setdefault("epp_command", KIT_EPP_COMMAND)
    if mode == "gaie-epp":
        # GAIE's own conformance setup: test-epp-endpoint-selection decides (a request without it gets 429).
        options.setdefault("conformance", True)
    return Topology(mode=mode, flow=flow, vllm=[VllmSpec(name, extra_args=list(vllm_args)) for name in vllm],
                    latency=MockLatency(time_to_first_token=ttft_ms, inter_token_latency=itl_ms), options=options)


# -- faults -------------------------------------------------------------------------------------------

def _container(process):
    """The docker-py container behind a ManagedContainer, or None for a local process."""
    return getattr(process, "_container", None)


@contextmanager
def frozen(process) -> Iterator[None]:
    """The component hangs (alive, port open, answers nothing) inside the ``with``.

    Local: SIGSTOP / SIGCONT to its process group. Docker: ``docker pause`` / ``unpause`` (the
    cgroup freezer). Either way the kernel still accepts TCP connections, as for a wedged process.
    """
    container = _container(process)
    if container is not None:
        container.pause()
    else:
        os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if container is not None:
            container.unpause()
        else:
            os.killpg(process.pid, signal.SIGCONT)


def freeze_for(process, seconds: float) -> threading.Thread:
    """Freeze ``process`` for ``seconds`` in the background (a slow component); join the thread after."""
    started = threading.Event()

    def run():
        with frozen(process):
            started.set()
            time.sleep(seconds)

    thread = threading.Thread(target=run, name="freeze", daemon=True)
    thread.start()
    started.wait(5)
    return thread


def kill(bed, name: str) -> None:
    """SIGKILL a component (a crash: nothing flushed, no goodbye on its sockets)."""
    bed.services[name].process.kill()


def restart(bed, name: str, timeout_s: float = 30.0) -> None:
    """Start a killed or stopped component again on its port and wait until it answers."""
    handle = bed.services[name]
    handle.process.start()
    port = int(handle.url.rsplit(":", 1)[1])
    if name == Service.EPP:  # gRPC: the port is the readiness
        import socket

        def listening():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                return False

        poll(listening, timeout_s=timeout_s, describe=f"{name} listening again")
        return

    def healthy():
        try:
            return requests.get(handle.url + "/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    poll(healthy, timeout_s=timeout_s, describe=f"{name} healthy again")


# -- checks -------------------------------------------------------------------------------------------

def assert_openai_error(status: int, body, expected_status: int | tuple[int, ...], *, code=None, mentions=None,
                        error_type=None) -> None:
    """``body`` is ``{"error": {"message", "type", ...}}`` and the status is the expected one."""
    wanted = expected_status if isinstance(expected_status, tuple) else (expected_status,)
    assert status in wanted, f"expected HTTP {wanted}, got {status}: {body!r}"[:2000]
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"not an OpenAI-style error: {body!r}"[:2000]
    error = body["error"]
    assert error.get("message") and error.get("type"), f"error without message or type: {error!r}"
    assert '"error"' not in str(error["message"]), f"an error wrapped inside another one's message: {error!r}"
    if code is not None:
        codes = code if isinstance(code, tuple) else (code,)
        assert error.get("code") in codes, f"expected error.code in {codes}, got {error.get('code')!r}: {error!r}"
    if error_type is not None:
        assert error.get("type") == error_type, f"expected error.type {error_type!r}, got {error.get('type')!r}: {error!r}"
    if mentions is not None:
        assert mentions in error["message"], f"expected the message to mention {mentions!r}: {error['message']!r}"


def not_running(bed) -> list[str]:
    return [name for name, proc in bed.processes().items() if not proc.is_running()]


def assert_kit_healthy(bed, *, except_: tuple[str, ...] = ()) -> None:
    """Envoy answers LIVE and every component (but the ones a test took down) still runs."""
    ready = requests.get(bed.envoy_admin_url + "/ready", timeout=5)
    assert ready.text.strip() == "LIVE", f"Envoy is not LIVE: {ready.status_code} {ready.text!r}"
    down = [n for n in not_running(bed) if n not in except_]
    assert not down, f"components no longer running: {down}\n{bed.log_tails(30)}"


_COUNTER_LINE = r"^{name}(?:\{{[^}}]*\}})?\s+(\S+)"


def counter(url: str, name: str) -> float:
    """The sum of every sample of metric ``name`` at ``url``/metrics (0 when absent)."""
    text = requests.get(url + "/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(_COUNTER_LINE.format(name=re.escape(name)), text, re.M))


def envoy_stat(bed, name: str) -> int:
    text = requests.get(f"{bed.envoy_admin_url}/stats?filter=^{re.escape(name)}$", timeout=5).text
    m = re.search(rf"^{re.escape(name)}: (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def wait_for_cluster_health(bed, cluster: str, healthy: bool, timeout_s: float = 10.0) -> None:
    """Until Envoy's active health check sees ``cluster``'s only host as (un)healthy."""

    def seen():
        text = requests.get(bed.envoy_admin_url + "/clusters", timeout=5).text
        flags = [line for line in text.splitlines() if line.startswith(f"{cluster}::") and "::health_flags::" in line]
        return bool(flags) and (("failed_active_hc" not in flags[0]) == healthy)

    poll(seen, timeout_s=timeout_s, interval_s=0.1, describe=f"Envoy seeing {cluster} {'healthy' if healthy else 'unhealthy'}")


# -- a streaming request the test controls -----------------------------------------------------------

class SpanSource:
    """The root span of requests sent outside TracedClient (raw streams), exported as service ``client``."""

    def __init__(self, otlp_endpoint: str, mode: str, flow: str = "aggregated"):
        self.mode, self.flow = mode, flow
        self.provider = TracerProvider(resource=Resource.create({ResourceAttributes.SERVICE_NAME: Service.CLIENT}))
        endpoint = otlp_endpoint if "://" in otlp_endpoint else f"http://{otlp_endpoint}"
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True),
                                                            schedule_delay_millis=100))
        self.tracer = self.provider.get_tracer("eppkit.tests.reliability")

    def close(self) -> None:
        self.provider.force_flush(5000)
        self.provider.shutdown()


@dataclass
class StreamOutcome:
    trace_id: str
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    events: list = field(default_factory=list)  # parsed SSE data objects, "[DONE]" as {"done": True}
    error: str | None = None  # how the read ended, when it did not end with [DONE]
    body: object = None  # a non-streamed (error) answer, parsed

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == {"done": True}

    @property
    def error_events(self) -> list[dict]:
        return [e for e in self.events if isinstance(e, dict) and "error" in e]


class Stream:
    """POST a streaming chat request through Envoy as the root span of its own trace.

    ``first_data()`` returns once the first SSE event has arrived (the pod that serves is in
    ``headers``); then ``abandon()`` closes the connection (a client that goes away) or
    ``read_to_end()`` reads on until the server ends the stream, cleanly or not.
    """

    def __init__(self, bed, spans: SpanSource, body: dict, headers: dict | None = None, timeout_s: float = 30.0):
        self.bed, self.spans = bed, spans
        self._cm = spans.tracer.start_as_current_span(
            Client.REQUEST, kind=SpanKind.CLIENT,
            attributes={Eppkit.MODE: spans.mode, Eppkit.FLOW: spans.flow, Http.REQUEST_METHOD: "POST"})
        self.span = self._cm.__enter__()
        self.outcome = StreamOutcome(trace_id=format(self.span.get_span_context().trace_id, "032x"))
        out_headers = {"content-type": "application/json", **(headers or {})}
        propagate.inject(out_headers)
        self._session = requests.Session()
        self._resp = self._session.post(bed.envoy_url + "/v1/chat/completions", data=json.dumps(body),
                                        headers=out_headers, stream=True, timeout=timeout_s)
        self.outcome.status = self._resp.status_code
        self.outcome.headers = {k.lower(): v for k, v in self._resp.headers.items()}
        self.span.set_attribute(Http.RESPONSE_STATUS_CODE, self._resp.status_code)
        self._lines = self._resp.iter_lines(chunk_size=None)
        self._closed = False

    def _next_event(self) -> bool:
        """Read one SSE data line into outcome.events; False at the end of the stream."""
        for line in self._lines:
            if not line or not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            self.outcome.events.append({"done": True} if payload == b"[DONE]" else json.loads(payload))
            return True
        return False

    def first_data(self) -> StreamOutcome:
        if "text/event-stream" not in self.outcome.headers.get("content-type", ""):
            raw = self._resp.content
            self.outcome.body = json.loads(raw) if raw else None
            self._finish()
            return self.outcome
        assert self._next_event(), "the stream ended before its first event"
        return self.outcome

    def abandon(self) -> StreamOutcome:
        """The client goes away mid-answer: close the socket without reading on."""
        self.outcome.error = "client closed the connection"
        self._resp.close()  # unread body: urllib3 closes the socket instead of pooling it
        self.span.set_status(Status(StatusCode.ERROR, "client went away"))
        self.span.add_event(Client.ABANDONED)
        self._finish()
        return self.outcome

    def read_to_end(self) -> StreamOutcome:
        try:
            while self._next_event():
                if self.outcome.done:
                    break
        except requests.RequestException as exc:
            self.outcome.error = f"{type(exc).__name__}: {exc}"
        if not self.outcome.done and self.outcome.error is None:
            self.outcome.error = "the stream ended without data: [DONE]"
        if self.outcome.error or self.outcome.error_events:
            self.span.set_status(Status(StatusCode.ERROR, self.outcome.error or "error event in the stream"))
        self._finish()
        return self.outcome

    def _finish(self) -> None:
        if not self._closed:
            self._closed = True
            self._resp.close()
            self._session.close()
            self._cm.__exit__(None, None, None)


class HangUp:
    """A request written on a raw socket (the root span of its own trace) that the client can
    abandon before any byte of the answer came back, e.g. while the backend prefills."""

    def __init__(self, bed, spans: SpanSource, body: dict, headers: dict | None = None):
        import socket

        self._cm = spans.tracer.start_as_current_span(
            Client.REQUEST, kind=SpanKind.CLIENT,
            attributes={Eppkit.MODE: spans.mode, Eppkit.FLOW: spans.flow, Http.REQUEST_METHOD: "POST"})
        self._span = self._cm.__enter__()
        self.trace_id = format(self._span.get_span_context().trace_id, "032x")
        out = {"content-type": "application/json", **(headers or {})}
        propagate.inject(out)
        data = json.dumps(body).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in out.items()) + "\r\n").encode()
        self._sock = socket.create_connection(("127.0.0.1", bed.listen_port), timeout=10)
        self._sock.sendall(head + data)

    def hang_up(self) -> None:
        self._sock.close()
        self._span.set_status(Status(StatusCode.ERROR, "client went away before the answer"))
        self._span.add_event(Client.ABANDONED)
        self._cm.__exit__(None, None, None)


# -- memory -------------------------------------------------------------------------------------------

def rss_bytes(process) -> int | None:
    """Resident memory of a component: its process and every descendant (``VmRSS`` in /proc).

    A local component's pid is the service itself; a container's is the host pid of its init
    (docker-init), whose child is the service; either way the sum is the component's memory.
    """
    pid = process.pid
    if not pid:
        return None
    return procfs.tree_status(pid, "VmRSS").get("VmRSS", 0) * 1024 or None


# -- load ----------------------------------------------------------------------------------------------

class _InjectingClient:
    """The TracedClient the driver uses, plus per-request headers (injected failures) by body identity."""

    def __init__(self, client, headers_by_body: dict[int, dict]):
        self._client = client
        self._headers = headers_by_body

    def chat(self, body, **kwargs):
        return self._client.chat(body, headers=self._headers.get(id(body)), **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


@dataclass
class LoadResult:
    mode: str
    runtime: str
    requests: int
    concurrency: int
    wall_s: float
    stopped: str | None
    answered: int  # requests that got an HTTP answer (any status); the rest are lost
    ok: int
    injected: set[int]
    errors: dict[int, str]  # index -> error kind, for every failed request
    unexpected: dict[int, str]  # failed requests that were not injected, and injected ones that did not fail
    incomplete: dict[int, list[str]]  # index -> missing spans, for requests whose trace is incomplete
    e2e_ms: list[float]
    rss_start: dict[str, int]
    rss_end: dict[str, int]
    rss_max: dict[str, int]
    rss_mid: dict[str, int] = field(default_factory=dict)  # half-way through the run
    trace_wait_s: float = 0.0

    def pct(self, q: float) -> float:
        values = sorted(self.e2e_ms)
        return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] if values else 0.0

    @property
    def lost(self) -> int:
        return self.requests - self.answered

    def rss_growth(self) -> dict[str, tuple[int, int]]:
        return {name: (self.rss_start[name], self.rss_end.get(name, 0)) for name in self.rss_start}

    def summary(self) -> str:
        mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
        rss = ", ".join(f"{n} {mib(self.rss_start[n])}->{mib(self.rss_mid.get(n, 0))}->{mib(self.rss_end.get(n, 0))}"
                        for n in sorted(self.rss_start))
        return (f"[load {self.runtime}/{self.mode}] {self.requests} requests at concurrency {self.concurrency} "
                f"in {self.wall_s:.1f} s ({self.ok / self.wall_s if self.wall_s else 0:.0f} req/s): "
                f"lost {self.lost}, ok {self.ok}, injected {len(self.injected)}, errors {len(self.errors)} "
                f"(unexpected {len(self.unexpected)}), incomplete traces {len(self.incomplete)} "
                f"(read back in {self.trace_wait_s:.1f} s); e2e p50 {self.pct(50):.1f} ms p99 {self.pct(99):.1f} ms; "
                f"RSS MiB start->half-way->end: {rss}")


class RssSampler:
    """Every component's RSS now and then, in the background, keeping the maximum."""

    def __init__(self, bed, every_s: float = 0.5):
        self.bed, self.every_s = bed, every_s
        self.max: dict[str, int] = {}
        self.series: list[tuple[float, dict[str, int]]] = []  # (monotonic time, snapshot)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def snapshot(self) -> dict[str, int]:
        out = {}
        for name, proc in self.bed.processes().items():
            if name == "jaeger":
                continue  # the trace store: it grows with every span it holds, by design
            value = rss_bytes(proc)
            if value:
                out[name] = value
        return out

    def _run(self):
        while not self._stop.wait(self.every_s):
            snap = self.snapshot()
            self.series.append((time.monotonic(), snap))
            for name, value in snap.items():
                self.max[name] = max(self.max.get(name, 0), value)

    def at(self, t: float) -> dict[str, int]:
        """The sample nearest to monotonic time ``t`` ({} when none was taken)."""
        return min(self.series, key=lambda item: abs(item[0] - t))[1] if self.series else {}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def run_load(bed, *, requests: int, concurrency: int, max_duration_s: float, inject_every: int = 0,
             warmup: int = 0, request_timeout_s: float = 30.0, trace_timeout_s: float = 120.0,
             seed: int = 0) -> LoadResult:
    """Drive ``requests`` streaming chats at ``concurrency`` through ``bed`` and account for every one.

    Every ``inject_every``-th request carries ``x-mock-failure: 500`` (0: none). ``warmup``
    requests go first at the same concurrency (not counted) so the RSS start is taken on warm
    processes. Stops by itself: the driver dispatches nothing after ``max_duration_s`` and each
    request has its own timeout; trace read-back has its own deadline.
    """
    mode = bed.topology.mode
    scenario = SCENARIOS["stream"]
    load = Load(concurrency=concurrency, max_duration_s=max_duration_s, request_timeout_s=request_timeout_s)
    client = bed.client(pool_size=concurrency)
    try:
        if warmup:
            Driver(client, load).run(plan_requests(scenario, warmup, seed + 1_000_003))
        planned = plan_requests(scenario, requests, seed)
        injected = {r.index for r in planned if inject_every and r.index % inject_every == inject_every - 1}
        headers = {id(r.body): {"x-mock-failure": "500"} for r in planned if r.index in injected}
        sampler = RssSampler(bed)
        rss_start = sampler.snapshot()
        t_start = time.monotonic()
        with sampler:
            driver = Driver(_InjectingClient(client, headers), load)
            work = driver.run(planned)
        rss_end = sampler.snapshot()
        rss_mid = sampler.at(t_start + work.wall_s / 2)
        client.flush()
    finally:
        client.close()

    answered = sum(1 for s in work.samples if s.status)  # an HTTP answer arrived (it may still have broken later)
    errors = {s.index: s.error for s in work.samples if s.error}
    unexpected = {i: kind for i, kind in errors.items() if i not in injected or kind != "http_500"}
    unexpected.update({i: "injected failure not seen" for i in injected if i not in errors})

    # Every request's trace, the failed ones included: a served request must hold every step of
    # its mode; an injected 500 stops at the mock's llm_request (nothing queued or decoded).
    full = kit.expected(mode, "aggregated")
    refused = tuple(r for r in full if r.service != Service.VLLM) + expected_spans.rules([Vllm.REQUEST])
    t0 = time.monotonic()
    traces = bed.jaeger.wait_for_traces({s.trace_id: refused if s.index in injected else full
                                         for s in work.samples if s.trace_id}, timeout_s=trace_timeout_s)
    trace_wait = time.monotonic() - t0
    incomplete = {s.index: traces[s.trace_id][1] for s in work.samples if s.trace_id and traces[s.trace_id][1]}
    incomplete.update({s.index: ["no trace id"] for s in work.samples if not s.trace_id})
    return LoadResult(
        mode=mode, runtime=bed.runtime, requests=requests, concurrency=concurrency, wall_s=work.wall_s,
        stopped=work.stopped, answered=answered, ok=len(work.ok), injected=injected, errors=errors,
        unexpected=unexpected, incomplete=incomplete, e2e_ms=[s.e2e_ms for s in work.samples if s.ok],
        rss_start=rss_start, rss_end=rss_end, rss_max={**sampler.max}, rss_mid=rss_mid, trace_wait_s=trace_wait,
    )
