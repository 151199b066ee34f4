"""Where the EPP's decisions come from: the picker core in-process, or (sidecar mode) the frontend.

In sidecar mode (the Dynamo proposal) the EPP asks the frontend with ``x-routing-request: true``
and relays its answer; the shed and force hooks and the stage picks stay in the EPP. Either way
the EPP's stream (services/epp/stream.py) sees one :class:`Picker`.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

import aiohttp
from eppkit.observability import otel
from eppkit.observability.contract import Frontend
from eppkit.services.picker import headers as h
from eppkit.services.picker.core import Picker as CorePicker
from eppkit.services.picker.core import forced_decision, shed_by_header
from eppkit.services.picker.decision import Decision, PickError
from eppkit.services.picker.request import LlmRequest

log = logging.getLogger("epp.sidecar")


class Picker(Protocol):
    scorer_name: str

    async def pick(self, request: LlmRequest) -> Decision: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class FrontendPicker:
    """Sidecar mode: asks the frontend (``x-routing-request: true``) and relays its answer.

    The frontend tokenizes and routes; it answers ``{"worker_id", "endpoint", "token_count",
    "scorer", "reason", "fallbacks"}``. Its 4xx/5xx answers become the client's answer. A frontend
    that cannot be reached is a 503 (no decision can be made), not a crash. ``local`` is the core
    picker over the same pool: its force and shed hooks and its stage picks run here.
    """

    scorer_name = "frontend"

    def __init__(self, local: CorePicker, frontend_url: str, *, timeout_s: float = 5.0):
        self.local = local
        self.pool = local.pool
        self.frontend_url = frontend_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the keep-alive connection now, so the first request does not pay for it."""
        try:
            async with self._client().get(f"{self.frontend_url}/health") as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("frontend %s not reachable yet: %s", self.frontend_url, exc)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def pick(self, request: LlmRequest) -> Decision:
        return self.local.with_stages(await self._pick_decoder(request), request)

    async def _pick_decoder(self, request: LlmRequest) -> Decision:
        shed_by_header(request, self.scorer_name)
        forced = forced_decision(self.pool, request)
        if forced is not None:
            return forced
        path = request.path if request.path.startswith("/") else "/" + request.path
        headers = {"content-type": "application/json", h.ROUTING_REQUEST: "true"}
        if request.subset is not None:  # the data plane's subset hint: the frontend picks within it
            headers[h.SUBSET] = ",".join(request.subset)
        otel.inject(headers)
        url = f"{self.frontend_url}{path.split('?', 1)[0]}"
        try:
            async with self._client().post(url, data=request.body, headers=headers) as resp:
                text = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise PickError(
                503, f"no endpoint available: frontend {self.frontend_url} unreachable ({exc.__class__.__name__}: {exc})",
                code="frontend_unreachable", scorer=self.scorer_name,
            ) from None
        try:
            answer = json.loads(text) if text else {}
        except json.JSONDecodeError:
            answer = {}
        if status != 200:
            error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            raise PickError(status if 400 <= status < 600 else 502,
                            error.get("message") or f"frontend answered {status}: {text[:200]}",
                            code=str(error.get("code", "frontend_error")), scorer=self.scorer_name)
        address = answer.get("endpoint")
        if not isinstance(address, str) or ":" not in address:
            raise PickError(502, f"frontend answer has no endpoint: {text[:200]}", code="frontend_bad_answer",
                            scorer=self.scorer_name)
        endpoint = self.pool.find(address)
        if endpoint is None:
            log.warning("frontend picked %s, which is not in the EPP's pool", address)
        else:
            self.pool.note_pick(endpoint)
        worker_id = answer.get("worker_id")
        return Decision(
            endpoint=endpoint,
            address=address,
            scorer=f"frontend:{answer.get('scorer', '?')}",
            reason=str(answer.get("reason", "frontend decision")),
            fallbacks=[a for a in answer.get("fallbacks", []) if isinstance(a, str)],
            worker_id=None if worker_id is None else str(worker_id),
            attributes={Frontend.TOKEN_COUNT: int(answer.get("token_count", 0) or 0)},
            details={k: v for k, v in answer.items() if k.startswith("kv_") and isinstance(v, int)},
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
