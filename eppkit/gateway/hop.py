"""The EPP hop phase by phase, from Envoy's own record of each request: any EPP, traced or not.

Every testbed's Envoy writes one JSON line per request into its log (envoy/base.yaml.j2): where the
request went, Envoy's timeline of it (µs from its first byte: request end, upstream start, first
response byte, ...) and, with ext_proc, the filter's per-phase record of the gRPC exchange with the EPP
(``FILTER_STATE(envoy.filters.http.ext_proc:TYPED)``: latency, call status, replies, bytes).

What the ext_proc latencies mean in FULL_DUPLEX_STREAMED (measured on Envoy 1.40, checked against
Envoy's debug log and the EPP's own spans): Envoy restarts its timer on every message it sends, so for
an EPP that reads the whole body before it answers (the kit's, GAIE's), ``request_header_latency_us`` is
*end of the request body → the decision arrived* and ``request_body_max_latency_us`` is *end of the body
→ the body released*; for a request without a body (GET) the first is a true round trip. Envoy 1.36
records no request-body phase in this mode (1.37 on does). ``total`` latencies add up overlapping
intervals: the phases below use the maxima.

The phases (:meth:`Hop.phases`, ms):

| phase | from Envoy's record | meaning |
|---|---|---|
| ``upload`` | request end | the client's request (headers and body) into Envoy |
| ``hold`` | upstream start − request end | what Envoy waited between the end of the request and the upstream's start: the EPP hop (and any filter's) |
| ``epp_decision`` | request_header_latency | the EPP's answer to the headers (its decision), after the body ended |
| ``epp_release`` | request_body_max_latency | the EPP's last body reply (the body handed back), after the body ended |
| ``epp_response_headers`` | response_header_latency | the EPP's answer to the response headers (response processing) |
| ``epp_response_body`` | response_body_max_latency | the slowest answer to one response body chunk |
| ``upstream`` | upstream first byte − upstream start | the backend's time to its first response byte |
| ``response`` | response end − response start | the response to the client |
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = "eppkit_hop"  # the key that marks a hop line among Envoy's log lines
# (phase, the timeline point it ends at, the point it starts at) for the phases read off Envoy's timeline.
_TIMELINE = (("upload", "request_end_us", None), ("hold", "upstream_start_us", "request_end_us"),
             ("upstream", "upstream_first_byte_us", "upstream_start_us"),
             ("response", "response_end_us", "response_start_us"))
# (phase, the ext_proc filter state's field) for the phases of the EPP hop itself.
_EXT_PROC = (("epp_decision", "request_header_latency_us"), ("epp_release", "request_body_max_latency_us"),
             ("epp_response_headers", "response_header_latency_us"),
             ("epp_response_body", "response_body_max_latency_us"))
PHASES = tuple(name for name, *_ in _TIMELINE[:2]) + tuple(name for name, _ in _EXT_PROC) + \
    tuple(name for name, *_ in _TIMELINE[2:])
# ext_proc's call status fields: a gRPC status per phase (0 OK; 9 FAILED_PRECONDITION: a spurious reply; 14: down).
CALL_STATUS = ("request_header_call_status", "request_body_last_call_status", "request_trailer_call_status",
               "response_header_call_status", "response_body_last_call_status", "response_trailer_call_status")


def _number(value: Any) -> float | None:
    if value is None or value == "" or value == "-":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class Hop:
    """One request as Envoy's access log records it (the line's fields as they are, numbers as numbers)."""

    fields: dict[str, Any]
    ext_proc: dict[str, Any] = field(default_factory=dict)  # the filter state; {} in modes without ext_proc

    @property
    def trace_id(self) -> str:
        parts = str(self.fields.get("traceparent") or "").split("-")
        return parts[1] if len(parts) == 4 else ""

    def __getitem__(self, key: str) -> Any:
        return self.fields.get(key)

    @property
    def code(self) -> int:
        return int(_number(self.fields.get("code")) or 0)

    def phases(self) -> dict[str, float]:
        """The request's phases in ms (module doc); a phase Envoy did not record is left out."""
        out: dict[str, float] = {}
        for name, end, start in _TIMELINE:
            until = _number(self.fields.get(end))
            since = 0.0 if start is None else _number(self.fields.get(start))
            if until is not None and since is not None:
                out[name] = max(0.0, until - since) / 1000
        for name, key in _EXT_PROC:
            value = _number(self.ext_proc.get(key))
            if value is not None:
                out[name] = value / 1000
        return {name: round(out[name], 3) for name in PHASES if name in out}

    def gateway_ms(self) -> float | None:
        """Envoy's own time on the request (ms): its whole time, first request byte to last response byte, less the
        backend's, upstream start to upstream end; what every filter did on both paths (and the client's upload) is
        in it. None when Envoy did not record those points (a request that never reached a backend)."""
        end, start, until = (_number(self.fields.get(k)) for k in ("response_end_us", "upstream_start_us",
                                                                     "upstream_end_us"))
        if end is None or start is None or until is None:
            return None
        return round(max(0.0, end - (until - start)) / 1000, 3)

    def call_statuses(self) -> dict[str, int]:
        """ext_proc's gRPC status per phase that had a call (0: OK)."""
        return {k: int(self.ext_proc[k]) for k in CALL_STATUS if _number(self.ext_proc.get(k)) is not None}

    def describe(self) -> str:
        """One line: the phases and what Envoy says about the request."""
        phases = "  ".join(f"{k} {v:.2f}" for k, v in self.phases().items())
        return f"{self.fields.get('code')} {self.fields.get('details')} route={self.fields.get('route')}  {phases} (ms)"


def parse(line: str) -> Hop | None:
    """A hop from one log line; None for any other line."""
    line = line.strip()
    if not line.startswith("{") or MARKER not in line:
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or MARKER not in data:
        return None
    ext_proc = data.pop("ext_proc", None)
    return Hop(data, ext_proc if isinstance(ext_proc, dict) else {})


# The start of a line of Envoy's own log (stderr), as it is written into the same file as the access log (stdout).
_APP_LINE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\]\[\d+\]\[[a-z]+\]")


class _Reader:
    """Hops from an Envoy log's lines, one at a time, with an access-log line that Envoy's own log cut in two joined
    again. Envoy writes its access log's buffer to stdout one slice at a time; a line that spans two slices is
    two writes, and a line of its own log (stderr, into the same file on the local runtime) can land between them:
    the record's head, the log line, a newline, the record's tail (seen in CI: fail-open's warnings, one per request,
    cut the record of one of its requests, which then read as "Envoy logged no line for it")."""

    def __init__(self) -> None:
        self._head: str | None = None  # a record's head whose tail has not come yet

    def feed(self, line: str) -> Hop | None:
        line = line.strip()
        if self._head is not None:
            if _APP_LINE.match(line):  # another of Envoy's own lines before the tail
                return None
            head, self._head = self._head, None
            joined = parse(head + line)
            if joined is not None:
                return joined
        found = parse(line)
        if found is None and line.startswith("{"):
            cut = _APP_LINE.search(line)
            if cut is not None:
                self._head = line[:cut.start()]
        return found


def read(lines: Iterable[str]) -> list[Hop]:
    """Every hop among ``lines`` (an Envoy log), oldest first."""
    reader = _Reader()
    return [hop for hop in map(reader.feed, lines) if hop is not None]


class LogIndex:
    """The hops of one Envoy log, read as the log grows: each line is parsed once, and a lookup reads only what was
    written since the last one (a check that looks up each of its requests in a log of thousands would otherwise
    parse the whole log every time)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.hops: list[Hop] = []
        self._by_trace: dict[str, Hop] = {}
        self._offset, self._rest = 0, b""
        self._reader = _Reader()
        self._lock = threading.Lock()

    def update(self) -> LogIndex:
        with self._lock:
            try:
                if self.path.stat().st_size < self._offset:  # a new log at the same path: read it from the start
                    self.hops, self._by_trace, self._offset, self._rest = [], {}, 0, b""
                    self._reader = _Reader()
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except FileNotFoundError:
                return self
            self._offset += len(data)
            *lines, self._rest = (self._rest + data).split(b"\n")
            for found in map(self._reader.feed, (line.decode(errors="replace") for line in lines)):
                if found is None:
                    continue
                self.hops.append(found)
                self._by_trace[found.trace_id] = found  # the newest record of a trace id, as a search from the end
        return self

    def find(self, trace_id: str) -> Hop | None:
        """The record of ``trace_id`` once Envoy has written it, else None."""
        return self.update()._by_trace.get(trace_id)


_INDEXES: OrderedDict[Path, LogIndex] = OrderedDict()
_INDEXES_KEPT = 32  # the logs of the testbeds most recently asked (a session runs hundreds of testbeds)
_indexes_lock = threading.Lock()


def index(path: Path) -> LogIndex:
    """The :class:`LogIndex` of the Envoy log at ``path`` (one per log, shared by every caller)."""
    path = Path(path)
    with _indexes_lock:
        found = _INDEXES.pop(path, None) or LogIndex(path)
        _INDEXES[path] = found
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
        return found
