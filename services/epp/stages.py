"""Picking the prefiller and the encoders of a disaggregated request (pd, epd, ttft flows).

In the disaggregated flows Envoy routes to the pd-sidecar in front of a decoder (the
decision the pickers already make); the sidecar then calls a prefiller and, for media,
encoders. As in llm-d, the picker chooses those too and passes them as request headers:

- ``x-prefiller-host-port``: one ``host:port`` (llm-d's routing sidecar reads it);
- ``x-encoder-hosts-ports``: comma-separated ``host:port`` list, one encoder per media item
  at most, starting at a rotating offset so consecutive requests spread over the encoders.

A request without media gets no encoder header; a pool without prefillers (E+PD) gets no
prefiller header. Whenever a stage pool exists, a client-sent header of that stage is
removed, so only the picker names them.

Test steering, like ``x-eppkit-force-endpoint``: ``x-eppkit-force-prefiller: <name|host:port>``
and ``x-eppkit-force-encoders: <name|host:port>[,...]`` (not in the pool: 503).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from eppkit.services.encoder.media import media_items
from eppkit.services.epp.pool import Pool, PoolEndpoint
from eppkit.services.epp.request import LlmRequest
from eppkit.services.epp.scorers import Scorer

FORCE_PREFILLER_HEADER = "x-eppkit-force-prefiller"
FORCE_ENCODERS_HEADER = "x-eppkit-force-encoders"


@dataclass
class StagePicks:
    prefiller: PoolEndpoint | None = None
    prefill_reason: str = ""
    encoders: list[PoolEndpoint] = field(default_factory=list)
    encoders_reason: str = ""

    def attributes(self) -> dict[str, str]:
        """Span attributes of the decision (``epp.prefiller``, ``epp.encoders``, ...)."""
        out: dict[str, str] = {}
        if self.prefiller is not None:
            out["epp.prefiller"] = self.prefiller.address
            out["epp.prefiller.name"] = self.prefiller.name
            out["epp.prefill.reason"] = self.prefill_reason
        if self.encoders:
            out["epp.encoders"] = ",".join(ep.address for ep in self.encoders)
            out["epp.encoders.names"] = ",".join(ep.name for ep in self.encoders)
            out["epp.encoders.reason"] = self.encoders_reason
        return out


class StageError(Exception):
    """No prefiller / encoder can be named (503), with the reason."""

    def __init__(self, message: str, code: str = "no_endpoint"):
        super().__init__(message)
        self.message = message
        self.code = code


def _forced(pool: Pool, header: str, value: str) -> list[PoolEndpoint]:
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    found = [pool.find(w) for w in wanted]
    missing = [w for w, ep in zip(wanted, found) if ep is None]
    if missing or not wanted:
        names = ", ".join(ep.name for ep in pool.endpoints) or "empty pool"
        raise StageError(f"{header}={value!r} names no endpoint of that pool ({names})")
    return [ep for ep in found if ep is not None]


class StagePicker:
    """Chooses the prefiller (with its own scorer over the prefill pool) and the encoders."""

    def __init__(self, prefill: Pool, encoders: Pool, scorer: Scorer):
        self.prefill = prefill
        self.encoders = encoders
        self.scorer = scorer
        self._encoder_turn = itertools.count()

    @property
    def active(self) -> bool:
        return bool(self.prefill.endpoints or self.encoders.endpoints)

    def pools(self) -> list[Pool]:
        return [p for p in (self.prefill, self.encoders) if p.endpoints]

    def pick(self, request: LlmRequest) -> StagePicks:
        picks = StagePicks()
        if self.prefill.endpoints:
            picks.prefiller, picks.prefill_reason = self._pick_prefiller(request)
        if self.encoders.endpoints and request.json_body is not None:
            items = len(media_items(request.json_body))
            if items:
                picks.encoders, picks.encoders_reason = self._pick_encoders(request, items)
        return picks

    def _pick_prefiller(self, request: LlmRequest) -> tuple[PoolEndpoint, str]:
        forced = request.headers.get(FORCE_PREFILLER_HEADER)
        if forced is not None:
            ep = _forced(self.prefill, FORCE_PREFILLER_HEADER, forced)[0]
            self.prefill.note_pick(ep)
            return ep, f"forced ({FORCE_PREFILLER_HEADER})"
        model = request.headers.get("x-gateway-model-name") or request.model
        candidates = [ep for ep in self.prefill.healthy() if ep.serves(model)]
        if not candidates:
            down = "; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.prefill.endpoints)
            raise StageError(f"no prefill endpoint available: {down}")
        pick = self.scorer.pick(request, candidates)
        self.prefill.note_pick(pick.endpoint)
        return pick.endpoint, f"{self.scorer.name}: {pick.reason}"

    def _pick_encoders(self, request: LlmRequest, items: int) -> tuple[list[PoolEndpoint], str]:
        forced = request.headers.get(FORCE_ENCODERS_HEADER)
        if forced is not None:
            return _forced(self.encoders, FORCE_ENCODERS_HEADER, forced), f"forced ({FORCE_ENCODERS_HEADER})"
        healthy = self.encoders.healthy()
        if not healthy:
            down = "; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.encoders.endpoints)
            raise StageError(f"no encoder available for {items} media item(s): {down}")
        turn = next(self._encoder_turn)
        start = turn % len(healthy)
        order = healthy[start:] + healthy[:start]
        chosen = order[: min(items, len(order))]
        return chosen, f"{items} media item(s), {len(chosen)} of {len(healthy)} encoders from turn {turn}"
