"""Reading a mode's traces back from Jaeger until each holds every span it should."""

from __future__ import annotations

import time
from typing import Callable

import requests

from eppkit.core.polling import PollTimeout, poll
from eppkit.observability import expected_spans
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.observability.trace_model import Trace, from_jaeger_json


def collect_traces(jaeger: JaegerClient, samples: list[dict], rules: Callable[[dict], tuple],
                   *, timeout_s: float, settle_s: float = 0.3, on_poll: Callable[[int, int], None] | None = None
                   ) -> dict[str, tuple[dict, Trace]]:
    """Fetch each successful sample's trace until it holds every expected span or ``timeout_s`` passes.

    Sets ``complete``/``missing`` on every successful sample; returns each trace read, by trace id: Jaeger's JSON
    and the trace parsed from it (parsed once: it is most of the time reading takes).
    ``settle_s``: first wait for Envoy's span flush (every 200 ms) and Jaeger's batch (100 ms); a trace not yet
    complete then is read again (every 0.3 s) until it is.
    """
    wanted = {s["trace_id"]: s for s in samples if s.get("ok") and s.get("trace_id")}
    raws: dict[str, tuple[dict, Trace]] = {}
    pending = dict(wanted)

    def read_pending() -> int:
        """One pass over the traces not yet complete; how many are still pending."""
        for trace_id, sample in list(pending.items()):
            try:
                raw = jaeger.get_trace_json(trace_id)
            except requests.RequestException:
                raw = None
            if raw is None:
                continue
            raws[trace_id] = raw, from_jaeger_json(raw)
            sample["missing"] = expected_spans.missing(raws[trace_id][1], rules(sample))
            if not sample["missing"]:
                del pending[trace_id]
        if on_poll:
            on_poll(len(wanted) - len(pending), len(wanted))
        return len(pending)

    time.sleep(settle_s)
    try:
        poll(read_pending, until=lambda left: left == 0, timeout_s=timeout_s, interval_s=0.3,
             describe="every trace complete")
    except PollTimeout:
        pass  # the incomplete ones are reported as such, with what they miss
    for trace_id, sample in wanted.items():
        if trace_id not in raws:
            sample["missing"] = ["the whole trace (Jaeger has no span of it)"]
        sample["complete"] = not sample["missing"]
    return raws
