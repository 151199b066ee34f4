"""The testbeds of one verdict, shared by every check and every protocol's run of one: one per variant, started once
(``bed("responses", epp_process_response=True)``), each check's own (:meth:`Testbeds.own`), their clients, and where
their logs stood when the check at hand began.

With ``keep`` (the suite's run) the base testbed, those the check at hand uses, and only the ``keep`` most recently
used others stay up: an older one is stopped (its Envoy record kept for the hop summary) and started again if a later
check asks for it. Every variant up at once was eight testbeds per EPP, and four suites in parallel ran some 30 Envoys,
120 mock servers and 80 followed container logs on two cores.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

from eppkit.gateway.hop import Hop
from eppkit.topology import Topology

BASE = "base"  # the variant most checks use: never retired
MakeBed = Callable[[Topology], Any]  # a started testbed of a topology (the plugin's factory, or create().start())


class Testbeds:
    """The testbeds ``make_bed`` starts of the subject's topologies (``topology_of(**options)``), kept as above."""

    def __init__(self, make_bed: MakeBed, topology_of: Callable[..., Topology], keep: int | None = None):
        self.make_bed, self.topology_of, self.keep = make_bed, topology_of, keep
        # (variant, options) -> testbed up, least recently used first
        self._beds: dict[tuple[str, str | None], Any] = {}
        self._clients: dict[int, Any] = {}
        self._retired_hops: list[Hop] = []
        self.envoy_binary = None  # the first testbed's (the report names the Envoy that judged)
        self._lock = threading.RLock()  # testbeds, clients and log marks, shared by the checks' threads
        # id(bed) -> (bed, Envoy's log size, the EPP's) at the check's start
        self._marks: dict[int, tuple[Any, int, int]] = {}
        self._pinned: set[tuple[str, str | None]] = set()  # variants of a check on a testbed of its own: never retired

    def bed(self, variant: str = BASE, topology: Topology | None = None, **options: Any):
        """The subject's testbed of ``variant`` (started on first use): its topology with ``options``, or
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
        bed = self.make_bed(topology if topology is not None else self.topology_of(**options))
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
                # Never one the check at hand has used (its _marks): its runs per protocol go on at once, and one
                # that has gone on to its next variant must not stop the testbed another is still sending through
                # (CI: no-endpoint-503's http/1.1 run found its Envoy gone, "connection refused", when its h2c run
                # had started ineligible-subset's testbed).
                others = [k for k, b in self._beds.items()
                          if k[0] != BASE and k not in self._pinned and id(b) not in self._marks]
                for old in others[:max(0, len(others) - self.keep + 1)]:
                    self._retire(old)
            bed = self.make_bed(topology if topology is not None else self.topology_of(**options))
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
        """The check at hand's logs begin now (:meth:`log_evidence`)."""
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

    def client(self, bed):
        with self._lock:
            if id(bed) not in self._clients:
                self._clients[id(bed)] = bed.client(pool_size=32)
            return self._clients[id(bed)]


def _envoy_warning(line: str) -> bool:
    """One of Envoy's own warnings or errors about a request (its ext_proc filter's, its router's), not the access
    log nor the start-up notices every Envoy prints."""
    return ("][warning][" in line or "][error][" in line) and "][main]" not in line
