"""``vllm:lora_requests_info``, written by the mock and read by the kit's picker and the conformance check, one place.

vLLM (``vllm/v1/metrics/loggers.py``) writes it as a gauge whose labels carry the state and whose value is the time it
was recorded: ``max_lora`` (``--max-loras``), ``waiting_lora_adapters`` and ``running_lora_adapters`` (the adapters
of waiting and of running requests, comma-separated). Every state it recorded stays a series of its own, so a reader
takes the series with the latest time, as GAIE's metrics extractor does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

NAME = "vllm:lora_requests_info"
MAX_LORA, WAITING, RUNNING = "max_lora", "waiting_lora_adapters", "running_lora_adapters"
LABELS = (MAX_LORA, WAITING, RUNNING)  # vLLM's order


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


@dataclass(frozen=True)
class LoraInfo:
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    max_lora: int = 0

    def labels(self) -> dict[str, str]:
        """The series' labels, as vLLM writes them."""
        return {MAX_LORA: str(self.max_lora), WAITING: ",".join(self.waiting), RUNNING: ",".join(self.running)}

    @property
    def has_room(self) -> bool:
        """Another adapter could be loaded (GAIE's lora-affinity rule: running and waiting adapters under max_lora)."""
        return len(self.running) + len(self.waiting) < self.max_lora

    def words(self) -> str:
        return (f"{RUNNING}={','.join(self.running)!r} {WAITING}={','.join(self.waiting)!r} "
                f"{MAX_LORA}={self.max_lora}")

    @classmethod
    def parse(cls, text: str) -> LoraInfo | None:
        """The latest series of ``vllm:lora_requests_info`` in a Prometheus exposition; None when it has none. Only
        its lines are parsed (a vLLM's /metrics is some 550 lines)."""
        lines = "\n".join(line for line in text.splitlines() if line.startswith(NAME + "{"))
        latest, when = None, -math.inf
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                if sample.name == NAME and sample.value >= when:
                    latest, when = sample.labels, sample.value
        if latest is None:
            return None
        try:
            max_lora = int(latest.get(MAX_LORA, "0") or 0)
        except ValueError:
            max_lora = 0
        return cls(running=_names(latest.get(RUNNING, "")), waiting=_names(latest.get(WAITING, "")),
                   max_lora=max_lora)
