"""The mock's /metrics: vLLM's metric names on prometheus_client, as vLLM itself exposes them.

Names, types and labels follow vLLM 0.32.0's ``vllm:*`` metrics (labels ``model_name``, ``engine``; label
values vLLM creates up front, such as every ``finished_reason``, created up front too) so a picker that
scrapes real vLLM (queue depth, KV-cache usage) scrapes the mock the same way; the process and Python
collectors are there as on vLLM's. tests/integration/test_vllm_parity.py compares the families with a real
vLLM's, and docs/mocks.md lists the few the mock leaves out. Mock-only metrics use the ``eppkit_mock_``
prefix, never ``vllm:``. Each instance has its own registry: tests run several mocks in one process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import Callable

from eppkit.services.openai_server import lora_info
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

# The classic text format every scraper reads; nothing here needs 1.0.0's escaping (':' is a legal name character).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The query parameter that asks for some samples only (repeated: ?name[]=a&name[]=b), as prometheus_client serves it.
NAME_PARAM = "name[]"
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LATENESS_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (0, 1, 2, 5, 10, 20, 50)
# Label values vLLM creates before the first request.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 buckets up to the context length."""
    out, base = [], 1
    while True:
        for step in (1, 2, 5):
            if base * step > max_model_len:
                return tuple(out)
            out.append(base * step)
        base *= 10


def cache_config_labels(block_size: int, num_gpu_blocks: int) -> dict[str, str]:
    """vllm:cache_config_info's labels, as vLLM 0.32.0's CPU build sets them (the mock's block size and capacity)."""
    return {
        "_block_size_resolved": "True", "block_size": str(block_size), "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None", "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True", "engine": "0",
        "gpu_memory_utilization": "0.92", "hash_block_size": "None", "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_max_concurrency": "None",
        "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": str(block_size * num_gpu_blocks),
        "kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_gpu_blocks), "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0", "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None",
        "replayssm_buffer_len": "16", "skip_page_size_padded": "None", "sliding_window": "None",
        "swa_bounded_replay": "True", "use_kda_recoverssm": "False", "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


class MetricSet:
    """Metrics on one registry, each with the instance's base labels (``engine``, ``model_name``) bound.

    A counter with extra labels comes back as a function of those labels: ``failures(type="500").inc()``.
    """

    def __init__(self, base: dict[str, str]) -> None:
        self.registry = CollectorRegistry()
        self.base = base
        # the process_* and python_* families, as prometheus_client's default registry shows them on vLLM's
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def gauge(self, name: str, doc: str, read: Callable[[], float]):
        gauge = Gauge(name, doc, list(self.base), registry=self.registry).labels(**self.base)
        gauge.set_function(read)
        return gauge

    def info(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        """A constant gauge whose labels carry the information (vLLM's ``*_info`` families: only those labels)."""
        Gauge(name, doc, list(labels), registry=self.registry).labels(**labels).set(value)

    def gauges(self, name: str, doc: str, label: str, values: dict[str, Callable[[], float]]) -> None:
        """A gauge with one more label, one series per value, each read live."""
        gauge = Gauge(name, doc, [*self.base, label], registry=self.registry)
        for value, read in values.items():
            gauge.labels(**self.base, **{label: value}).set_function(read)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...]):
        return Histogram(name, doc, list(self.base), buckets=buckets, registry=self.registry).labels(**self.base)

    def counter(self, name: str, doc: str, *labels: str, values: tuple[str, ...] = (), base: bool = True):
        """A counter; with extra ``labels``, a function of them, and the series of ``values`` (of the one extra
        label) created at once, as vLLM creates them. ``base=False``: without the engine label (vLLM's
        admission_rejections has only model_name)."""
        own = self.base if base else {"model_name": self.base["model_name"]}
        counter = Counter(name, doc, [*own, *labels], registry=self.registry)
        if not labels:
            return counter.labels(**own)
        for value in values:
            counter.labels(**own, **{labels[0]: value})
        return functools.partial(counter.labels, **own)

    def render(self, names: Iterable[str] = ()) -> bytes:
        """The exposition; with ``names``, only those samples' (``/metrics?name[]=...``, as prometheus_client's
        exposition serves them, vLLM's included: a scraper that reads three gauges gets three lines, not 45 KB)."""
        names = list(names)
        return generate_latest(self.registry.restricted_registry(names) if names else self.registry)


class VllmMetrics(MetricSet):
    """Everything the mock vLLM's /metrics shows. Gauges read live state through callables."""

    def __init__(self, model: str, running: Callable[[], float], waiting: Callable[[], float], kv_usage: Callable[[], float],
                 *, block_size: int = 16, num_gpu_blocks: int = 16384, max_model_len: int = 8192,
                 lora: Callable[[], lora_info.LoraInfo] | None = None) -> None:
        super().__init__({"engine": "0", "model_name": model})
        # The two info families an upstream EPP (GAIE's core metrics extractor) reads by their labels;
        # without them it logs an extract error per endpoint. Values as vLLM sets them: cache config 1,
        # the LoRA info's value is the time the adapter state was recorded (lora_info.py), here at each scrape;
        # without adapters its lists are empty and max_lora 0 (vLLM shows this family only with --enable-lora).
        self.info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                  cache_config_labels(block_size, num_gpu_blocks), 1.0)
        self._lora = lora
        self._lora_info = Gauge(lora_info.NAME, "Running stats on lora requests.", list(lora_info.LABELS),
                                registry=self.registry)
        self._lora_info.labels(**(lora() if lora else lora_info.LoraInfo()).labels()).set(time.time())
        self.num_requests_running = self.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        self.num_requests_waiting = self.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        # every waiting request of the mock waits for a slot: vLLM's "capacity"
        self.gauges("vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason.", "reason",
                    {"capacity": waiting, "deferred": lambda: 0.0})
        self.gauges("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping.",
                    "sleep_state", {s: (lambda s=s: 1.0 if s == "awake" else 0.0) for s in SLEEP_STATES})
        self.kv_cache_usage_perc = self.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
        self.ttft = self.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.tpot = self.histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS)
        self.e2e = self.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS)
        self.queue_time = self.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", E2E_BUCKETS)
        self.prefill_time = self.histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", E2E_BUCKETS)
        self.decode_time = self.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", E2E_BUCKETS)
        self.prompt_tokens = self.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = self.counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
        self.request_success = self.counter("vllm:request_success_total", "Count of successfully processed requests.",
                                            "finished_reason", values=FINISHED_REASONS)
        self.prefix_cache_queries = self.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = self.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
        # a decode request's KV pulled from its prefiller: the mock's "external" prefix cache (vLLM's KV connector)
        self.external_prefix_cache_queries = self.counter("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.")
        self.external_prefix_cache_hits = self.counter("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.")
        self.mm_cache_queries = self.counter("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items.")
        self.mm_cache_hits = self.counter("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items.")
        self.num_preemptions = self.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")  # the mock never preempts
        self.prompt_tokens_by_source = self.counter("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.",
                                                    "source", values=PROMPT_SOURCES)
        self.prompt_tokens_cached = self.counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).")
        self.prompt_tokens_cached_by_source = self.counter("vllm:prompt_tokens_cached_by_source_total", "Number of cached prompt tokens by the tier their KV came from.",
                                                           "source", values=CACHE_HIT_SOURCES)
        self.admission_rejections = self.counter("vllm:admission_rejections_total", "Number of admission attempts rejected by a queue limit, by reason.",
                                                 "reason", values=ADMISSION_REASONS, base=False)
        tokens = token_buckets(max_model_len)
        self.request_prompt_tokens = self.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.request_generation_tokens = self.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
        self.request_max_num_generation_tokens = self.histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tokens)
        self.request_params_n = self.histogram("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS)
        self.request_params_max_tokens = self.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens)
        self.request_prefill_kv_computed_tokens = self.histogram("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens)
        self.inter_token_latency = self.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.inference_time = self.histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", E2E_BUCKETS)
        self.request_num_preemptions = self.histogram("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.", PREEMPTION_BUCKETS)
        self.client_cancellations = self.counter("eppkit_mock_client_cancellations_total", "Requests whose client went away before the response ended (mock only).")
        self.injected_failures = self.counter("eppkit_mock_injected_failures_total", "Failures injected by flag or x-mock-failure, by type (mock only).", "type")
        self.token_lateness = self.histogram("eppkit_mock_token_lateness_seconds", "How late each streamed token (2..n) was written against its deadline (mock only).", LATENESS_BUCKETS)
        self.request_errors = self.counter("eppkit_mock_request_errors_total", "Requests answered with an error, by HTTP status (mock only).", "status")

    def render(self, names: Iterable[str] = ()) -> bytes:
        if self._lora is not None:  # the adapters' state now, as vLLM records it each step: a series per state seen
            self._lora_info.labels(**self._lora().labels()).set(time.time())
        return super().render(names)
