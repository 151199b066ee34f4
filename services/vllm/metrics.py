"""Prometheus text exposition with vLLM's metric names, written by hand (no dependency).

Names and buckets follow vLLM's ``vllm:*`` metrics (labels ``model_name``, ``engine``)
so a picker that scrapes real vLLM (queue depth, KV-cache usage) scrapes the mock the
same way. Mock-only counters use the ``eppkit_mock_`` prefix, never ``vllm:``.
"""

from __future__ import annotations

import bisect
from typing import Callable

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LATENESS_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v)) if isinstance(v, float) else str(v)


class Counter:
    def __init__(self, name: str, help_text: str, base_labels: dict[str, str]) -> None:
        self.name, self.help, self.base = name, help_text, base_labels
        self.values: dict[tuple, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        if not self.values:
            lines.append(f"{self.name}{_labels(self.base)} 0.0")
        for key, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels({**self.base, **dict(key)})} {_num(float(value))}")
        return lines


class Gauge:
    def __init__(self, name: str, help_text: str, base_labels: dict[str, str], read: Callable[[], float]) -> None:
        self.name, self.help, self.base, self.read = name, help_text, base_labels, read

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name}{_labels(self.base)} {_num(float(self.read()))}"]


class Histogram:
    def __init__(self, name: str, help_text: str, base_labels: dict[str, str], buckets: tuple[float, ...]) -> None:
        self.name, self.help, self.base = name, help_text, base_labels
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip(self.buckets + (float("inf"),), self.counts):
            cumulative += n
            lines.append(f"{self.name}_bucket{_labels({**self.base, 'le': _num(float(bound))})} {cumulative}")
        lines.append(f"{self.name}_sum{_labels(self.base)} {_num(self.sum)}")
        lines.append(f"{self.name}_count{_labels(self.base)} {self.count}")
        return lines


class VllmMetrics:
    """Everything /metrics shows. Gauges read live state through callables."""

    def __init__(self, model: str, running: Callable[[], float], waiting: Callable[[], float], kv_usage: Callable[[], float]) -> None:
        base = {"engine": "0", "model_name": model}
        self.num_requests_running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", base, running)
        self.num_requests_waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", base, waiting)
        self.kv_cache_usage_perc = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", base, kv_usage)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", base, TTFT_BUCKETS)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", base, ITL_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", base, E2E_BUCKETS)
        self.queue_time = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", base, E2E_BUCKETS)
        self.prefill_time = Histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", base, E2E_BUCKETS)
        self.decode_time = Histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", base, E2E_BUCKETS)
        self.prompt_tokens = Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", base)
        self.generation_tokens = Counter("vllm:generation_tokens_total", "Number of generation tokens processed.", base)
        self.request_success = Counter("vllm:request_success_total", "Count of successfully processed requests.", base)
        self.prefix_cache_queries = Counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", base)
        self.prefix_cache_hits = Counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", base)
        self.client_cancellations = Counter("eppkit_mock_client_cancellations_total", "Requests whose client went away before the response ended (mock only).", base)
        self.injected_failures = Counter("eppkit_mock_injected_failures_total", "Failures injected by flag or x-mock-failure, by type (mock only).", base)
        self.token_lateness = Histogram("eppkit_mock_token_lateness_seconds", "How late each streamed token (2..n) was written against its deadline (mock only).", base, LATENESS_BUCKETS)
        self.request_errors = Counter("eppkit_mock_request_errors_total", "Requests answered with an error, by HTTP status (mock only).", base)

    def render(self) -> str:
        lines: list[str] = []
        for metric in (
            self.num_requests_running,
            self.num_requests_waiting,
            self.kv_cache_usage_perc,
            self.ttft,
            self.tpot,
            self.e2e,
            self.queue_time,
            self.prefill_time,
            self.decode_time,
            self.prompt_tokens,
            self.generation_tokens,
            self.request_success,
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            self.client_cancellations,
            self.injected_failures,
            self.token_lateness,
            self.request_errors,
        ):
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
