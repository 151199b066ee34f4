"""What a picker answers: a :class:`Decision`, or a :class:`PickError` carrying the client's status.

A decision names the primary endpoint and the fallbacks (``x-gateway-destination-endpoint`` and the
``envoy.lb`` metadata carry both, comma-separated, which Envoy's "picked" cluster tries in order),
and in the disaggregated flows the prefiller and encoders. A PickError is 503 when there is no endpoint, 429 when the request is shed, 404 for
a model nobody serves, 400 when the body cannot be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eppkit.observability.contract import Decision as DecisionAttributes
from eppkit.observability.contract import Eppkit
from eppkit.services.picker import headers as h
from eppkit.services.picker.endpoints import PoolEndpoint


@dataclass
class StagePicks:
    """The prefiller and encoders chosen with the decoder (disaggregated flows)."""

    prefiller: PoolEndpoint | None = None
    prefill_reason: str = ""
    encoders: list[PoolEndpoint] = field(default_factory=list)
    encoders_reason: str = ""

    def attributes(self, names: DecisionAttributes) -> dict[str, str]:
        """Span attributes under a transport's names (the trace contract's ``Epp`` or ``Callout``)."""
        out: dict[str, str] = {}
        if self.prefiller is not None:
            out[names.PREFILLER] = self.prefiller.address
            out[names.PREFILLER_NAME] = self.prefiller.name
            out[names.PREFILL_REASON] = self.prefill_reason
        if self.encoders:
            out[names.ENCODERS] = ",".join(ep.address for ep in self.encoders)
            out[names.ENCODERS_NAMES] = ",".join(ep.name for ep in self.encoders)
            out[names.ENCODERS_REASON] = self.encoders_reason
        return out


@dataclass
class Decision:
    endpoint: PoolEndpoint | None  # None only when a frontend named an address outside the pool
    address: str
    scorer: str
    reason: str
    fallbacks: list[str] = field(default_factory=list)
    worker_id: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)  # extra span attributes, full names
    details: dict[str, Any] = field(default_factory=dict)  # the scorer's figures (Pick.details)
    # Disaggregated flows: the prefiller / encoders chosen with the decoder (None: no stage pools).
    stages: StagePicks | None = None

    @property
    def name(self) -> str:
        return self.endpoint.name if self.endpoint is not None else self.address

    @property
    def metadata_value(self) -> str:
        """Primary then fallbacks, comma-separated (the ``envoy.lb`` metadata value of the EPP protocol)."""
        return ",".join([self.address, *self.fallbacks])

    def prediction(self) -> dict[str, int]:
        """The span attribute of what the scorer expects the pod to hold ({} when it says nothing): a cache-aware
        scorer's ``kv_predicted_blocks`` × ``kv_block_size`` (kv-events-scorer), set beside the pod's own count."""
        blocks, size = self.details.get("kv_predicted_blocks"), self.details.get("kv_block_size")
        if not isinstance(blocks, int) or not isinstance(size, int):
            return {}
        return {Eppkit.PREDICTED_CACHED_TOKENS: blocks * size}

    def stage_headers(self) -> tuple[dict[str, str], list[str]]:
        """(headers to set, headers to remove) that pass the prefiller and encoders on, as llm-d does.

        Whenever stage pools exist, a client-sent stage header is removed: only the picker names them.
        """
        if self.stages is None:
            return {}, []
        set_headers: dict[str, str] = {}
        remove: list[str] = []
        if self.stages.prefiller is not None:
            set_headers[h.PREFILLER] = self.stages.prefiller.address
        else:
            remove.append(h.PREFILLER)
        if self.stages.encoders:
            set_headers[h.ENCODERS] = ",".join(ep.address for ep in self.stages.encoders)
        else:
            remove.append(h.ENCODERS)
        return set_headers, remove

    def headers(self) -> tuple[dict[str, str], list[str]]:
        """(headers to set, headers to remove) on the request: destination (primary and fallbacks,
        the metadata's value: the EPP protocol wants the two equal), worker id, stages."""
        set_headers = {h.DESTINATION: self.metadata_value}
        if self.worker_id is not None:
            set_headers[h.WORKER_ID] = self.worker_id
        stage_set, remove = self.stage_headers()
        set_headers.update(stage_set)
        return set_headers, remove


class PickError(Exception):
    def __init__(self, status: int, message: str, *, code: str, scorer: str = "", param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.headers = headers or {}  # on the answer beside the error body (flow control's dropped reason)
        self.status = status
        self.message = message
        self.code = code
        self.scorer = scorer
        self.param = param
