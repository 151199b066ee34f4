"""The mock's /metrics: vLLM's metric names on prometheus_client, as vLLM itself exposes them.

Names and buckets follow vLLM's ``vllm:*`` metrics (labels ``model_name``, ``engine``) so a
picker that scrapes real vLLM (queue depth, KV-cache usage) scrapes the mock the same way.
Mock-only metrics use the ``eppkit_mock_`` prefix, never ``vllm:``. Each instance has its own
registry: tests run several mocks in one process.
"""

from __future__ import annotations

import functools
import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# The classic text format every scraper reads; nothing here needs 1.0.0's escaping (':' is a legal name character).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LATENESS_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class MetricSet:
    """Metrics on one registry, each with the instance's base labels (``engine``, ``model_name``) bound.

    A counter with extra labels comes back as a function of those labels: ``failures(type="500").inc()``.
    """

    def __init__(self, base: dict[str, str]) -> None:
        self.registry = CollectorRegistry()
        self.base = base

    def gauge(self, name: str, doc: str, read: Callable[[], float]):
        gauge = Gauge(name, doc, list(self.base), registry=self.registry).labels(**self.base)
        gauge.set_function(read)
        return gauge

    def info(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        """A constant gauge whose labels carry the information (vLLM's ``*_info`` families)."""
        Gauge(name, doc, [*self.base, *labels], registry=self.registry).labels(**self.base, **labels).set(value)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...]):
        return Histogram(name, doc, list(self.base), buckets=buckets, registry=self.registry).labels(**self.base)

    def counter(self, name: str, doc: str, *labels: str):
        counter = Counter(name, doc, [*self.base, *labels], registry=self.registry)
        return functools.partial(counter.labels, **self.base) if labels else counter.labels(**self.base)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class VllmMetrics(MetricSet):
    """Everything the mock vLLM's /metrics shows. Gauges read live state through callables."""

    def __init__(self, model: str, running: Callable[[], float], waiting: Callable[[], float], kv_usage: Callable[[], float],
                 *, block_size: int = 16, num_gpu_blocks: int = 16384) -> None:
        super().__init__({"engine": "0", "model_name": model})
        # The two info families an upstream EPP (GAIE's core metrics extractor) reads by their labels;
        # without them it logs an extract error per endpoint. Values as vLLM sets them: cache config 1,
        # the LoRA info's value is the time the adapter state was recorded (the mock serves no adapters).
        self.info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                  {"block_size": str(block_size), "num_gpu_blocks": str(num_gpu_blocks)}, 1.0)
        self.info("vllm:lora_requests_info", "Running stats on lora requests.",
                  {"running_lora_adapters": "", "waiting_lora_adapters": "", "max_lora": "0"}, time.time())
        self.num_requests_running = self.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        self.num_requests_waiting = self.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        self.kv_cache_usage_perc = self.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
        self.ttft = self.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.tpot = self.histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS)
        self.e2e = self.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS)
        self.queue_time = self.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", E2E_BUCKETS)
        self.prefill_time = self.histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", E2E_BUCKETS)
        self.decode_time = self.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", E2E_BUCKETS)
        self.prompt_tokens = self.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = self.counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
        self.request_success = self.counter("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason")
        self.prefix_cache_queries = self.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = self.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
        self.client_cancellations = self.counter("eppkit_mock_client_cancellations_total", "Requests whose client went away before the response ended (mock only).")
        self.injected_failures = self.counter("eppkit_mock_injected_failures_total", "Failures injected by flag or x-mock-failure, by type (mock only).", "type")
        self.token_lateness = self.histogram("eppkit_mock_token_lateness_seconds", "How late each streamed token (2..n) was written against its deadline (mock only).", LATENESS_BUCKETS)
        self.request_errors = self.counter("eppkit_mock_request_errors_total", "Requests answered with an error, by HTTP status (mock only).", "status")
