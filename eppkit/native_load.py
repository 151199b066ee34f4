"""A :class:`eppkit.workload.Driver` whose requests a native client sends: the kit's load client (``eppkit/loadgen``,
vegeta's attacker in a Go program of the kit's, built once: :data:`eppkit.builds.own_go.LOAD_CLIENT`).

For thousands of short requests the Python client is the bound: its CPU per request (a span, a connection's
bookkeeping, an h2c stream by hand) is more than the EPP's it judges, and on 2 cores it takes that CPU from the EPP.
This one costs a small part of it and gives the same :class:`~eppkit.workload.Sample` per request (no token times:
a request's answer is judged whole or not, not timed token by token). Each request carries its own ``traceparent``,
so Envoy's record of it is found by trace id; one in :data:`TRACED_EVERY` is sampled (a trace to look at), the rest
are not (Envoy, the EPP and the pods record no spans for them: their CPU goes on serving).
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from eppkit.builds.own_go import LOAD_CLIENT
from eppkit.core.procfs import dying_with_parent
from eppkit.workload import Load, PlannedRequest, Progress, Sample, WorkloadResult

PATH = "/v1/chat/completions"
TRACED_EVERY = 50  # one request in this many is sampled (its trace in Jaeger); the others carry an unsampled context
# After the last request may be sent (max duration) and its bound (the request timeout), this much more for the
# client to write its last lines and end before it is killed.
GRACE_S = 10.0


class NativeDriver:
    """Sends planned requests through ``base_url`` with the kit's load client: the bounds of ``load`` (its
    concurrency, its max duration, each request's timeout; a rate is not supported), ``protocols`` in turn (request
    ``i`` in ``protocols[i % len]``), ``headers`` on every request, ``on_progress`` after each finished request,
    :meth:`halt` to send no more."""

    def __init__(self, base_url: str, load: Load = Load(), *, protocols: Sequence[str] = ("http/1.1",),
                 on_progress: Progress | None = None, headers: dict[str, str] | None = None,
                 binary: Path | None = None):
        self.url = base_url.rstrip("/") + PATH
        self.load = load.validate()
        if self.load.rate:
            raise ValueError("the load client sends as fast as its requests in flight free up: no rate")
        self.protocols = tuple(protocols) or ("http/1.1",)
        self.headers = dict(headers or {})  # on every request (a plugin's gate lets them through)
        self.on_progress = on_progress
        self.binary = binary
        self._halted: str | None = None
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def halt(self, reason: str) -> None:
        """Send no more requests (those in flight finish): ``reason`` becomes the result's ``stopped``."""
        with self._lock:
            self._halted = self._halted or reason
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)

    def run(self, requests: Sequence[PlannedRequest]) -> WorkloadResult:
        binary = self.binary or LOAD_CLIENT.build()
        out = WorkloadResult(planned=len(requests))
        planned = {r.index: r for r in requests}
        traces = {r.index: secrets.token_hex(16) for r in requests}
        with tempfile.TemporaryDirectory(prefix="eppkit-load-") as work:
            plan, stderr = Path(work) / "plan.jsonl", Path(work) / "stderr"
            with plan.open("w") as f:
                for i, r in enumerate(requests):
                    sampled = "01" if i % TRACED_EVERY == 0 else "00"
                    f.write(json.dumps({"index": r.index, "protocol": self.protocols[r.index % len(self.protocols)],
                                        "traceparent": f"00-{traces[r.index]}-{secrets.token_hex(8)}-{sampled}",
                                        "body": json.dumps(r.body), "stream": r.stream,
                                        "headers": self.headers}) + "\n")
            argv = [str(binary), "-url", self.url, "-requests", str(plan),
                    "-concurrency", str(self.load.concurrency), "-timeout", f"{self.load.request_timeout_s:g}s",
                    "-max-duration", f"{self.load.max_duration_s:g}s"]
            t0 = time.monotonic()
            with stderr.open("w") as err:
                with self._lock:
                    self._proc = subprocess.Popen(dying_with_parent(argv), stdout=subprocess.PIPE, stderr=err,
                                                  text=True)
                    if self._halted:  # halted before it began
                        self._proc.send_signal(signal.SIGTERM)
                bound = threading.Timer(self.load.max_duration_s + self.load.request_timeout_s + GRACE_S,
                                        self._proc.kill)
                bound.start()
                try:
                    stopped = self._read(self._proc, planned, traces, out, t0)
                finally:
                    bound.cancel()
                    self._proc.wait()
            if self._proc.returncode not in (0, -signal.SIGTERM) and not out.samples:
                raise RuntimeError(f"the load client ({binary}) exited {self._proc.returncode}: "
                                   + stderr.read_text(errors="replace").strip()[-500:])
        out.wall_s = time.monotonic() - t0
        if self._halted:
            out.stopped = f"{self._halted}: stopped after {len(out.samples)} of {len(requests)} requests"
        elif stopped:
            out.stopped = stopped
        out.samples.sort(key=lambda s: s.index)
        return out

    def _read(self, proc: subprocess.Popen, planned: dict[int, PlannedRequest], traces: dict[int, str],
              out: WorkloadResult, t0: float) -> str:
        """Each finished request's line into ``out``; what the last line says stopped the client early."""
        errors = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            found = json.loads(line)
            if found.get("done"):
                return found.get("stopped") or ""
            request = planned[found["index"]]
            sample = Sample(index=request.index, trace_id=traces[request.index], status=found["status"],
                            error=found["error"], detail=found["detail"], sent_s=round(found["sent_s"], 4),
                            e2e_ms=round(found["e2e_ms"], 3), ttft_ms=None, tokens=0,
                            media_items=request.media_items, pod=found.get("pod") or None)
            out.samples.append(sample)
            errors += sample.error is not None
            if self.on_progress is not None:
                self.on_progress(len(out.samples), len(planned), errors, time.monotonic() - t0)
        return "the load client ended without its last line"
