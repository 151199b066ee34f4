"""Picking the prefiller and the encoders of a disaggregated request (pd, epd, ttft flows).

In the disaggregated flows Envoy routes to the pd-sidecar in front of a decoder (the decision
the pickers already make); the sidecar then calls a prefiller and, for media, encoders. As in
llm-d, the picker chooses those too and passes them as request headers:

- ``x-prefiller-host-port``: one ``host:port``, chosen by a scorer of the decoder's type;
- ``x-encoder-hosts-ports``: comma-separated ``host:port``, one encoder per media item at most,
  starting at a rotating offset so consecutive requests spread over the encoders.

A request without media gets no encoder header; a pool without prefillers (E+PD) gets no
prefiller header. Test steering: ``x-eppkit-force-prefiller: <name|host:port>`` and
``x-eppkit-force-encoders: <name|host:port>[,...]`` (not in the pool: 503).
"""

from __future__ import annotations

import itertools

from eppkit.services.openai_server.media import media_items
from eppkit.services.picker import headers as h
from eppkit.services.picker.decision import PickError, StagePicks
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.request import LlmRequest
from eppkit.services.picker.scorers import Scorer


def forced(pool: Pool, header: str, value: str, *, every: bool = True, scorer: str = "") -> list[PoolEndpoint]:
    """The endpoints a steering header names (names, ``host:port``, or a bare IP for every endpoint
    on that host), in its order and without repeats; 503 when it names one outside the pool
    (``every=False``: only when it names none in the pool; the others are then left out)."""
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    found = [pool.match(w) for w in wanted]
    if not any(found) or (every and not all(found)):
        raise PickError(503, f"no endpoint available: {header}={value!r} names no endpoint of the pool "
                             f"({pool.names()})", code="no_endpoint", scorer=scorer, param=header)
    out: list[PoolEndpoint] = []
    for ep in (ep for eps in found for ep in eps):
        if ep not in out:
            out.append(ep)
    return out


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
        value = request.headers.get(h.FORCE_PREFILLER)
        if value is not None:
            ep = forced(self.prefill, h.FORCE_PREFILLER, value)[0]
            self.prefill.note_pick(ep)
            return ep, f"forced ({h.FORCE_PREFILLER})"
        model = request.requested_model
        candidates = [ep for ep in self.prefill.healthy() if ep.serves(model)]
        if not candidates:
            down = "; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.prefill.endpoints)
            raise PickError(503, f"no prefill endpoint available: {down}", code="no_endpoint")
        pick = self.scorer.pick(request, candidates)
        self.prefill.note_pick(pick.endpoint)
        return pick.endpoint, f"{self.scorer.name}: {pick.reason}"

    def _pick_encoders(self, request: LlmRequest, items: int) -> tuple[list[PoolEndpoint], str]:
        value = request.headers.get(h.FORCE_ENCODERS)
        if value is not None:
            return forced(self.encoders, h.FORCE_ENCODERS, value), f"forced ({h.FORCE_ENCODERS})"
        healthy = self.encoders.healthy()
        if not healthy:
            down = "; ".join(f"{ep.name} ({ep.last_error or 'down'})" for ep in self.encoders.endpoints)
            raise PickError(503, f"no encoder available for {items} media item(s): {down}", code="no_endpoint")
        turn = next(self._encoder_turn)
        start = turn % len(healthy)
        order = healthy[start:] + healthy[:start]
        chosen = order[: min(items, len(order))]
        return chosen, f"{items} media item(s), {len(chosen)} of {len(healthy)} encoders from turn {turn}"
