"""What the checks drive: the EPP's testbeds (one per variant, started once), requests through Envoy, and
Envoy's own record of each request (its access-log line, its ext_proc stats, the trace).

A check asks for a testbed by variant (``bed("responses", epp_process_response=True)``); the harness starts
each variant once. With ``keep`` (the suite's run) the base testbed and only the ``keep`` most recently used
others stay up: an older one is stopped (its Envoy record kept for the hop summary) and started again if a later
check asks for it.
Every variant up at once was eight testbeds per EPP, and four suites in parallel ran some 30 Envoys, 120 mock
servers and 80 followed container logs on two cores. Every request has a bound (``request_timeout_s``): an
EPP that never answers makes a check fail with Envoy's evidence, never hangs the suite.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable

import requests

from eppkit.conformance.checks.latency import Budget, CostBudget
from eppkit.conformance.target import REQUEST_TIMEOUT_S, Target
from eppkit.conformance.witness import NotWitnessed, Sent, cause, served
from eppkit.core.polling import PollTimeout, poll
from eppkit.core.progress import Progress
from eppkit.gateway.hop import Hop
from eppkit.observability.client import HTTP1, PROTOCOLS, ClientResult
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_BODY_SHA256, HEADER_POD
from eppkit.topology import Topology

BASE = "base"  # the variant most checks use: never retired


def _quiet(message: str) -> None:
    """Progress nobody reads (a check's tests in pytest)."""
MakeBed = Callable[[Topology], Any]  # a started testbed of a topology (the plugin's factory, or create().start())


class Harness:
    def __init__(self, target: Target, make_bed: MakeBed, *, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 keep: int | None = None, protocols: tuple[str, ...] = PROTOCOLS,
                 budget: Budget | CostBudget | None = None, quick: bool = False, soak_judged_on: str | None = None,
                 progress: Progress = _quiet):
        self.target = target
        # The run's settings: the soak left out (--quick), or judged already on the first Envoy of a version matrix;
        # what a long check says of its progress (the command prints it).
        self.quick, self.soak_judged_on, self.progress = quick, soak_judged_on, progress
        self.make_bed = make_bed
        self.request_timeout_s = request_timeout_s
        self.keep = keep
        self._beds: dict[tuple[str, str | None], Any] = {}  # (variant, options) -> testbed up, least recently used first
        self._clients: dict[int, Any] = {}
        self._retired_hops: list[Hop] = []
        self.envoy_binary = None  # the first testbed's (the report names the Envoy that judged)
        self._local = threading.local()  # the client's protocol: each protocol's run of a check has a thread of its own
        self._lock = threading.RLock()  # testbeds, clients and log marks, shared by those threads
        self.protocols = protocols  # every one a check is run with
        # Whether the EPP serves streams at once: then each check's protocols, and its requests, are sent at once
        # (:meth:`probe_concurrency`); an EPP that does not is judged one request at a time (concurrent-streams
        # fails it), so that no other check fails for it. A plugin's testbed has no EPP: its protocols are sent at
        # once but in its timed checks (Check.timed), and streams-served judges the filter's streams at once.
        self.concurrent = getattr(target, "kind", "epp") == "plugin"
        # the latency budget (checks.latency): the EPP's, or what a plugin may add (cost-within-budget)
        self.budget = budget or (CostBudget() if getattr(target, "kind", "epp") == "plugin" else Budget())
        self._marks: dict[int, tuple[Any, int, int]] = {}  # id(bed) -> (bed, Envoy's log size, the EPP's) at the check's start
        self._pinned: set[tuple[str, str | None]] = set()  # variants of a check running beside the others: never retired

    # -- testbeds ---------------------------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        """The client protocol of the check run at hand (HTTP/1.1 unless the suite says otherwise)."""
        return getattr(self._local, "protocol", HTTP1)

    @protocol.setter
    def protocol(self, value: str) -> None:
        self._local.protocol = value

    def bed(self, variant: str = BASE, topology: Topology | None = None, **options: Any):
        """The EPP's testbed of ``variant`` (started on first use): the target's topology with ``options``, or
        ``topology`` as given (a variant of another target: fail-open's unreachable EPP)."""
        with self._lock:
            return self._bed(variant, topology, options)

    def own_bed(self, variant: str, topology: Topology | None = None, **options: Any):
        """A testbed of ``variant`` for a check that runs beside the others (:attr:`Check.beside`): up on top of
        the ``keep`` ones, never retired by another check's, until :meth:`release` (``topology``: as :meth:`bed`).
        A new one starts outside the harness's lock: the checks it runs beside go on meanwhile (a control plane to
        start takes seconds)."""
        key = self._key(variant, topology, options)
        with self._lock:
            self._pinned.add(key)
            if key in self._beds:
                return self._bed(variant, topology, options)
        bed = self.make_bed(topology if topology is not None else self.target.topology(**options))
        with self._lock:
            self.envoy_binary = self.envoy_binary or getattr(bed, "envoy_binary", None)
            self._beds[key] = bed
            return self._bed(variant, topology, options)

    @contextmanager
    def own(self, variant: str, topology: Topology | None = None, **options: Any) -> Iterator[Any]:
        """``with h.own(variant) as bed:`` a testbed of :meth:`own_bed`, released at the block's end whatever
        happens."""
        bed = self.own_bed(variant, topology, **options)
        try:
            yield bed
        finally:
            self.release(bed)

    def release(self, bed) -> None:
        """Stop a testbed of :meth:`own_bed` now (its requests are left out of :meth:`hops`: the check that sent
        them reports them)."""
        with self._lock:
            key = next((k for k, b in self._beds.items() if b is bed), None)
            if key is not None:
                self._pinned.discard(key)
                self._retire(key, keep_hops=False)

    @staticmethod
    def _key(variant: str, topology: Topology | None, options: dict[str, Any]) -> tuple[str, str | None]:
        return variant, None if topology is not None else json.dumps(options, sort_keys=True, default=str)

    def _bed(self, variant: str, topology: Topology | None, options: dict[str, Any]):
        key = self._key(variant, topology, options)
        bed = self._beds.pop(key, None)
        if bed is None:
            if self.keep is not None and variant != BASE and key not in self._pinned:
                others = [k for k in self._beds if k[0] != BASE and k not in self._pinned]
                for old in others[:max(0, len(others) - self.keep + 1)]:
                    self._retire(old)
            bed = self.make_bed(topology if topology is not None else self.target.topology(**options))
            self.envoy_binary = self.envoy_binary or getattr(bed, "envoy_binary", None)
        self._beds[key] = bed  # most recently used last
        if id(bed) not in self._marks:  # first used by the check at hand: its logs from here on are its own
            self._marks[id(bed)] = (bed, *self._log_sizes(bed))
        return bed

    # -- what Envoy and the EPP logged during one check ----------------------------------------------------
    @staticmethod
    def _log_sizes(bed) -> tuple[int, int]:
        procs = getattr(bed, "processes", dict)()
        sizes = []
        for name in ("envoy", "epp"):
            proc = procs.get(name)
            try:
                sizes.append(proc.log_path.stat().st_size if proc is not None else 0)
            except OSError:
                sizes.append(0)
        return sizes[0], sizes[1]

    def begin_check(self) -> None:
        self._marks = {}

    def mark(self, bed) -> tuple[Any, int, int]:
        """Where ``bed``'s logs are now: :meth:`log_evidence` from ``marks``, for a check beside the others (the
        checks after it begin their own marks while it runs)."""
        return (bed, *self._log_sizes(bed))

    def log_evidence(self, lines: int = 8, marks: list[tuple[Any, int, int]] | None = None) -> list[str]:
        """For a failed check: what Envoy warned about while it ran (its ext_proc filter's words: a spurious reply,
        a gRPC error), the EPP's last log lines from that time, and where the testbeds' run folders are (the
        check at hand's testbeds, or the :meth:`mark` s given)."""
        out = []
        for bed, envoy_at, epp_at in (marks if marks is not None else list(self._marks.values())):
            procs = getattr(bed, "processes", dict)()
            for name, since, keep in (("envoy", envoy_at, _envoy_warning), ("epp", epp_at, None)):
                proc = procs.get(name)
                if proc is None:
                    continue
                try:
                    with open(proc.log_path, "rb") as f:
                        f.seek(since)
                        text = f.read().decode(errors="replace")
                except OSError:
                    continue
                found = [line for line in text.splitlines() if keep is None or keep(line)][-lines:]
                if found:
                    out.append(f"{'Envoy' if name == 'envoy' else 'the EPP'} logged ({proc.log_path}):")
                    out += [f"  {line[:400]}" for line in found]
            out.append(f"run folder: {bed.run_dir}")
        return out

    def forced_bed(self, variant: str = "forced", **options: Any):
        """A testbed whose EPP honours GAIE's test header (the target's test_header_options)."""
        return self.bed(variant, **{**self.target.test_header_options, **options})

    def _retire(self, key: tuple[str, str | None], keep_hops: bool = True) -> None:
        bed = self._beds.pop(key)
        self._close_client(bed)
        if keep_hops:
            self._retired_hops.extend(bed.hops())
        bed.stop()  # stopped again by its maker at the end: a no-op

    def hops(self) -> list[Hop]:
        """Envoy's record of every request so far, the stopped testbeds' included."""
        return [*self._retired_hops, *(h for bed in self._beds.values() if bed is not None for h in bed.hops())]

    def stop(self) -> None:
        for bed in list(self._beds.values()):
            self._close_client(bed)
        self._beds.clear()  # the maker (a factory, or the suite's own create()) stops them

    def _close_client(self, bed) -> None:
        client = self._clients.pop(id(bed), None)
        if client is not None:
            try:
                client.close()
            except Exception:
                pass

    # -- requests -----------------------------------------------------------------------------------------
    def client(self, bed):
        with self._lock:
            if id(bed) not in self._clients:
                self._clients[id(bed)] = bed.client(pool_size=32)
            return self._clients[id(bed)]

    def probe_concurrency(self) -> bool:
        """Three requests at once on the base testbed, each body in two pieces 50 ms apart, so their streams are open
        together: :attr:`concurrent` unless some were served and some not (all failing is the EPP failing every
        request, which the checks find and name; some failing is the EPP failing a stream because another is open)."""
        try:
            bed = self.bed()
            with ThreadPoolExecutor(max_workers=3) as pool:
                sents = list(pool.map(lambda _: self.send(bed, pieces=2, pause_s=0.05), range(3)))
        except Exception:  # no testbed to ask (it fails to start: the first check says so): one at a time
            self.concurrent = False
        else:
            self.concurrent = len({served(s) for s in sents}) == 1
        return self.concurrent

    def send_all(self, bed, requests: list[dict[str, Any]]) -> list[Sent]:
        """Several requests (each :meth:`send`'s keyword arguments) in this protocol, at once where the EPP serves
        streams at once (:attr:`concurrent`); their Sents in order."""
        protocol = self.protocol
        if not self.concurrent:
            return [self.send(bed, **kwargs) for kwargs in requests]

        def one(kwargs: dict[str, Any]) -> Sent:
            self.protocol = protocol
            return self.send(bed, **kwargs)

        with ThreadPoolExecutor(max_workers=len(requests) or 1) as pool:
            return list(pool.map(one, requests))

    def chat(self, bed, *, headers: dict[str, str] | None = None, stream: bool = False, max_tokens: int = 2,
             prompt: str = "hello there", raw_body: bytes | None = None, let_through: bool = True,
             client: Any = None, **traffic: Any) -> ClientResult:
        """A chat request in the harness's client protocol (``traffic``: the traced client's ``pieces``,
        ``pause_s``, ``trailers``, ``cancel_after``; ``client``: another than the testbed's traced one)."""
        body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens, "stream": stream}
        return (client or self.client(bed)).chat(body, headers=self._gate(headers, let_through),
                                                 timeout_s=self.request_timeout_s, raw_body=raw_body,
                                                 protocol=self.protocol, **traffic)

    def get(self, bed, path: str = "/v1/models", headers: dict[str, str] | None = None,
            let_through: bool = True) -> ClientResult:
        return self.client(bed).chat(None, path=path, method="GET", headers=self._gate(headers, let_through),
                                     timeout_s=self.request_timeout_s, protocol=self.protocol)

    def _gate(self, headers: dict[str, str] | None, let_through: bool) -> dict[str, str] | None:
        """``headers`` and, with ``let_through``, the headers a plugin's gate lets through (the target's, if any)."""
        gate = getattr(self.target, "let_through_headers", dict)() if let_through else {}
        return {**gate, **(headers or {})} if gate else headers

    def send(self, bed, *, method: str = "POST", **kwargs: Any) -> Sent:
        """A request (:meth:`chat`, or :meth:`get` with ``method="GET"``; ``let_through=False``: without the headers
        a plugin's gate lets through) and Envoy's record of it."""
        result = self.get(bed, **kwargs) if method == "GET" else self.chat(bed, **kwargs)
        return Sent(result, self.hop(bed, result), self.protocol)

    def must_serve(self, sent: Sent, what: str, *, status: int = 200, backend: bool = True) -> Sent:
        """``sent`` if it was served as intended (:func:`eppkit.conformance.witness.served`); else the check is not
        run, with the true cause (NotWitnessed)."""
        if not served(sent, status=status, backend=backend):
            raise NotWitnessed(f"{what} ({sent.protocol}) was not served as intended", sent, self.request_timeout_s)
        return sent

    def cause(self, sent: Sent) -> str:
        return cause(sent, self.request_timeout_s)

    def concurrently(self, bed, n: int, fn: Callable[[], ClientResult]) -> list[ClientResult]:
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(lambda _: fn(), range(n)))

    def hop(self, bed, result: ClientResult, timeout_s: float = 3.0) -> Hop | None:
        """Envoy's record of the request (None when Envoy logged none within ``timeout_s``)."""
        try:
            return bed.hop(result, timeout_s=timeout_s)
        except PollTimeout:
            return None

    def hops_of(self, bed, results: list[ClientResult], timeout_s: float = 3.0) -> list[Hop]:
        """Envoy's record of each of ``results`` (in their order), read from its log once they are all in it (one
        read for many requests, not one poll each); PollTimeout when some are still missing after ``timeout_s``."""
        wanted = [r.trace_id for r in results]

        def all_in() -> list[Hop] | None:
            by_trace = {hop.trace_id: hop for hop in bed.hops()}
            return [by_trace[t] for t in wanted] if all(t in by_trace for t in wanted) else None

        return poll(all_in, timeout_s=timeout_s, interval_s=0.05, describe="Envoy's access log lines of the requests")

    # -- Envoy's and the pool's side ------------------------------------------------------------------------
    def stats(self, bed, prefix: str = "http.ingress.ext_proc.") -> dict[str, int]:
        """Envoy's counters under ``prefix`` (its ext_proc filter's by default)."""
        text = requests.get(f"{bed.envoy_admin_url}/stats?filter=^{re.escape(prefix)}", timeout=5).text
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+): (\d+)$", text, re.M)}

    def wait_epp_unhealthy(self, bed, timeout_s: float = 10.0) -> None:
        """Until Envoy's active health check marks the EPP down (fail-open needs Envoy to know first)."""

        def seen() -> bool:
            text = requests.get(bed.envoy_admin_url + "/clusters", timeout=5).text
            return any(line.startswith("epp::") and "::health_flags::" in line and "failed_active_hc" in line
                       for line in text.splitlines())

        poll(seen, timeout_s=timeout_s, interval_s=0.1, describe="Envoy marking the EPP unhealthy")

    @staticmethod
    def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}

    @staticmethod
    def address(bed, pod: str) -> str:
        return next(ep.address for ep in bed.backends if ep.name == pod)

    @staticmethod
    def pod_of(bed, address: str) -> str | None:
        return next((ep.name for ep in bed.backends if ep.address == address), None)

    @staticmethod
    def served_by(result: ClientResult) -> str | None:
        return result.headers.get(HEADER_POD)

    @staticmethod
    def body_digest(result: ClientResult) -> str | None:
        """The sha256 of the body the backend received (the mock says it)."""
        return result.headers.get(HEADER_BODY_SHA256)

    @staticmethod
    def body_length(result: ClientResult) -> int | None:
        """How many bytes of the body the backend received (the mock says it), or None."""
        said = result.headers.get(HEADER_BODY_BYTES)
        return int(said) if said is not None and said.isdigit() else None

    @staticmethod
    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()


def _envoy_warning(line: str) -> bool:
    """One of Envoy's own warnings or errors about a request (its ext_proc filter's, its router's), not the access
    log nor the start-up notices every Envoy prints."""
    return ("][warning][" in line or "][error][" in line) and "][main]" not in line
