"""What a check drives (its ``h``): the subject's testbeds (:mod:`eppkit.conformance.testbeds`), requests through
Envoy in the client protocol of the run at hand, and Envoy's own record of each request (its access-log line, its
ext_proc stats, the trace).

The scheduler hands each protocol's run of a check a harness of its own (:meth:`Harness.on`): the same testbeds,
settings and subject, its own protocol, so that the runs of one check go on at once in threads of their own. Every
request has a bound (``request_timeout_s``): an EPP that never answers makes a check fail with Envoy's evidence, never
hangs the suite.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Generic

import requests

from eppkit.conformance.budget import Budget, CostBudget
from eppkit.conformance.subject import PLUGIN, S
from eppkit.conformance.target import REQUEST_TIMEOUT_S, PluginTarget, Target
from eppkit.conformance.testbeds import BASE, MakeBed, Testbeds
from eppkit.conformance.witness import NotWitnessed, Sent, cause, served
from eppkit.core.polling import PollTimeout, poll
from eppkit.core.progress import Progress
from eppkit.gateway.hop import Hop
from eppkit.observability.client import HTTP1, PROTOCOLS, ClientResult
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_BODY_SHA256, HEADER_POD
from eppkit.topology import Topology

__all__ = ["BASE", "EppHarness", "Harness", "MakeBed", "PluginHarness"]


def _quiet(message: str) -> None:
    """Progress nobody reads (a check's tests in pytest)."""


class Harness(Generic[S]):
    """What a check drives (its ``h``): the subject's testbeds, requests through them in its run's client protocol
    (:attr:`protocol`), Envoy's record of each, and the run's settings. Typed by its subject: an EPP check takes an
    :data:`EppHarness`, a plugin check a :data:`PluginHarness`."""

    def __init__(self, target: S, make_bed: MakeBed, *, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 keep: int | None = None, protocols: tuple[str, ...] = PROTOCOLS,
                 budget: Budget | CostBudget | None = None, quick: bool = False, soak_judged_on: str | None = None,
                 progress: Progress = _quiet):
        self.target: S = target
        self.testbeds = Testbeds(make_bed, target.topology, keep)  # shared by every run of every check
        # The run's settings: the soak left out (--quick), or judged already on the first Envoy of a version matrix;
        # what a long check says of its progress (the command prints it).
        self.quick, self.soak_judged_on, self.progress = quick, soak_judged_on, progress
        self.request_timeout_s = request_timeout_s
        self.protocols = protocols  # every one a check is run with
        self.protocol = HTTP1  # the client protocol of this run of a check (:meth:`on`)
        # Whether the EPP serves streams at once: then each check's protocols, and its requests, are sent at once
        # (:meth:`probe_concurrency`); an EPP that does not is judged one request at a time (concurrent-streams
        # fails it), so that no other check fails for it. A plugin's testbed has no EPP: its protocols are sent at
        # once but in its timed checks (Check.timed), and streams-served judges the filter's streams at once.
        self.concurrent = target.kind == PLUGIN
        # the latency budget (checks.latency): the EPP's, or what a plugin may add (cost-within-budget)
        self.budget = budget or (CostBudget() if target.kind == PLUGIN else Budget())

    def on(self, protocol: str) -> Harness[S]:
        """This harness for a run in ``protocol``: the same testbeds, settings and subject."""
        run = copy.copy(self)
        run.protocol = protocol
        return run

    # -- testbeds (eppkit.conformance.testbeds) ------------------------------------------------------------------
    @property
    def envoy_binary(self):
        """The Envoy of the first testbed (the report names the Envoy that judged); None before one started."""
        return self.testbeds.envoy_binary

    def bed(self, variant: str = BASE, topology: Topology | None = None, **options: Any):
        """The subject's testbed of ``variant`` (started on first use): its topology with ``options``, or
        ``topology`` as given (a variant of another target: fail-open's unreachable EPP)."""
        return self.testbeds.bed(variant, topology, **options)

    def forced_bed(self, variant: str = "forced", **options: Any):
        """A testbed whose EPP honours GAIE's test header (the target's test_header_options)."""
        return self.bed(variant, **{**self.target.test_header_options, **options})

    def own_bed(self, variant: str, topology: Topology | None = None, **options: Any):
        """A testbed of ``variant`` of its own for a check on one (:data:`~eppkit.conformance.registry.OWN_TESTBED`):
        :meth:`Testbeds.own_bed`."""
        return self.testbeds.own_bed(variant, topology, **options)

    @contextmanager
    def own(self, variant: str, topology: Topology | None = None, **options: Any) -> Iterator[Any]:
        """``with h.own(variant) as bed:`` a testbed of its own, released at the block's end whatever happens."""
        with self.testbeds.own(variant, topology, **options) as bed:
            yield bed

    def release(self, bed) -> None:
        self.testbeds.release(bed)

    def begin_check(self) -> None:
        """The check at hand's logs begin now (:meth:`log_evidence`)."""
        self.testbeds.begin_check()

    def mark(self, bed) -> tuple[Any, int, int]:
        """Where ``bed``'s logs are now, for a check on a testbed of its own: :meth:`Testbeds.mark`."""
        return self.testbeds.mark(bed)

    def log_evidence(self, lines: int = 8, marks: list[tuple[Any, int, int]] | None = None) -> list[str]:
        """What Envoy and the EPP logged during the check at hand (or since ``marks``):
        :meth:`Testbeds.log_evidence`."""
        return self.testbeds.log_evidence(lines, marks)

    def hops(self) -> list[Hop]:
        """Envoy's record of every request so far, the stopped testbeds' included."""
        return self.testbeds.hops()

    def stop(self) -> None:
        self.testbeds.stop()

    def client(self, bed):
        return self.testbeds.client(bed)

    # -- requests -----------------------------------------------------------------------------------------
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
        if not self.concurrent:
            return [self.send(bed, **kwargs) for kwargs in requests]
        with ThreadPoolExecutor(max_workers=len(requests) or 1) as pool:
            return list(pool.map(lambda kwargs: self.send(bed, **kwargs), requests))

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
        gate = self.target.let_through_headers() if let_through else {}
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


EppHarness = Harness[Target]  # what an EPP check (eppkit.conformance.checks) takes
PluginHarness = Harness[PluginTarget]  # what a plugin check (eppkit.conformance.plugin_checks) takes
