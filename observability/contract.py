"""The trace contract: every service, span, span event and attribute name eppkit's parts emit or read.

Each name is declared once here, with a one-line description, and imported by whoever emits it
(the services, the traced client, the Go module's constant is checked against it) and by whoever
reads it (expected spans, steps, the waterfall, the report, the tests). The constants are plain
strings, so ``span.set_attribute(Epp.ENDPOINT, ...)`` and ``trace.one(Vllm.DECODE)`` read as usual.

In the manner of OpenTelemetry's semantic-convention registry: names that OpenTelemetry defines
(``http.*``, ``url.*``, ``rpc.*``, ``error.type``, ``service.*``) are used as it spells them
(``semconv=True``); the mock vLLM's ``gen_ai.*`` names and ``llm_request`` are the ones vLLM's own
tracing emits (``vllm/tracing.py``), so a trace of the mock reads like a trace of vLLM; Envoy's
names are Envoy's. Everything else is eppkit's own and keeps the spelling users' traces carry.

A span declares the attributes and events it may carry; :func:`violations` checks a trace (or
recorded spans) against that, and docs/CONTRACTS.md's trace section is :func:`markdown`'s output
(a test keeps the two equal). Adding a span: declare it in its service's class below, emit it,
regenerate the doc (``python -m eppkit.observability.contract_check --write docs/CONTRACTS.md``). How a name is
declared (an :class:`Entry` of one kind, once) is :mod:`eppkit.observability.contract_entries`.
"""

from __future__ import annotations

from typing import NamedTuple

from eppkit.observability.contract_entries import ATTRIBUTE, EVENT, RESOURCE, SERVICE, SPAN, Entry, declared
from eppkit.observability.contract_entries import add as _add
from eppkit.observability.contract_entries import attribute as _attr
from eppkit.observability.contract_entries import event as _event
from eppkit.observability.contract_entries import resource as _resource
from eppkit.observability.contract_entries import service as _service
from eppkit.observability.contract_entries import span as _span

__all__ = ["ATTRIBUTE", "ENTRIES", "EVENT", "RESOURCE", "SERVICE", "SPAN", "Entry", "entries", "service_of", "span"]


# -- services and resources ----------------------------------------------------------------------------

class Service:
    """``service.name`` of each process that exports spans."""

    CLIENT = _service("client", "the traced client; its span is the root of every request's trace")
    ENVOY = _service("envoy", "Envoy (service_name of the OpenTelemetry tracer in envoy/base.yaml.j2)")
    EPP = _service("epp", "the endpoint picker behind ext_proc (ext_proc and sidecar modes)")
    FRONTEND = _service("frontend", "the KV-aware router the EPP asks in the sidecar mode")
    CALLOUT = _service("callout", "the HTTP /pick service of the callout modes")
    PD_SIDECAR = _service("pd-sidecar", "the sidecar in front of each decoder that runs E/P/D")
    VLLM = _service("vllm", "the mock vLLM (prefill, decode or both), or a real vLLM (its llm_request only)")
    ENCODER = _service("encoder", "the mock multimodal encoder (epd flow)")
    ECHO_EPP = _service("echo-epp", "the echo EPP: answers every ext_proc message at once (the floor of an EPP hop), "
                                    "can misbehave on purpose (conformance fixtures)")


class ResourceAttributes:
    """Resource attributes every kit service sets (observability/otel.py)."""

    SERVICE_NAME = _resource("service.name", "one of the services above")
    SERVICE_INSTANCE_ID = _resource("service.instance.id", "which instance: vllm-0, epp-<port>, encoder-1, ...")


# -- attributes shared by several services -----------------------------------------------------------

class Http:
    REQUEST_METHOD = _attr("http.request.method", "HTTP method of the request", semconv=True)
    RESPONSE_STATUS_CODE = _attr("http.response.status_code", "HTTP status of the answer", semconv=True)
    URL_PATH = _attr("url.path", "path of the request", semconv=True)
    PROTOCOL_VERSION = _attr("network.protocol.version", "the HTTP version the client spoke: 1.1 or 2 (h2c)",
                             semconv=True)


class Rpc:
    SYSTEM = _attr("rpc.system", "grpc", semconv=True)
    SERVICE = _attr("rpc.service", "envoy.service.ext_proc.v3.ExternalProcessor", semconv=True)
    METHOD = _attr("rpc.method", "Process", semconv=True)


class Error:
    TYPE = _attr("error.type", "the error's class: an HTTP status or an OpenAI error code", semconv=True)


class ExceptionEvent:
    """What OpenTelemetry's SDK records when an exception leaves a span's ``with`` block (any span)."""

    TYPE = _attr("exception.type", "the exception's class", semconv=True)
    MESSAGE = _attr("exception.message", "its message", semconv=True)
    STACKTRACE = _attr("exception.stacktrace", "its traceback", semconv=True)
    ESCAPED = _attr("exception.escaped", "it left the span's scope", semconv=True)
    EVENT = _add(Entry(EVENT, "exception", "an exception left the span (recorded by the SDK)",
                       attributes=(TYPE, MESSAGE, STACKTRACE, ESCAPED), semconv=True, origin="OpenTelemetry"))


class GenAi:
    """As vLLM's tracing names them (vllm/tracing.py ``SpanAttributes``)."""

    REQUEST_ID = _attr("gen_ai.request.id", "the request id (x-request-id, or one made up)", origin="vLLM")
    REQUEST_MODEL = _attr("gen_ai.request.model", "the model the client asked for", semconv=True)
    REQUEST_MAX_TOKENS = _attr("gen_ai.request.max_tokens", "max_tokens of the request", semconv=True)
    REQUEST_TEMPERATURE = _attr("gen_ai.request.temperature", "temperature of the request", semconv=True)
    REQUEST_TOP_P = _attr("gen_ai.request.top_p", "top_p of the request", semconv=True)
    REQUEST_N = _attr("gen_ai.request.n", "choices asked for (always 1)", origin="vLLM")
    RESPONSE_MODEL = _attr("gen_ai.response.model", "the model that answered", semconv=True)
    RESPONSE_FINISH_REASONS = _attr("gen_ai.response.finish_reasons", "[stop | length | abort]", semconv=True)
    USAGE_PROMPT_TOKENS = _attr("gen_ai.usage.prompt_tokens", "prompt tokens", origin="vLLM")
    USAGE_COMPLETION_TOKENS = _attr("gen_ai.usage.completion_tokens", "generated tokens", origin="vLLM")
    USAGE_NUM_SEQUENCES = _attr("gen_ai.usage.num_sequences", "sequences generated (always 1)", origin="vLLM")
    LATENCY_TIME_IN_QUEUE = _attr("gen_ai.latency.time_in_queue", "seconds waiting for a slot", origin="vLLM")
    LATENCY_TIME_TO_FIRST_TOKEN = _attr("gen_ai.latency.time_to_first_token", "seconds to the first token",
                                        origin="vLLM")
    LATENCY_E2E = _attr("gen_ai.latency.e2e", "seconds from arrival to the last token", origin="vLLM")
    LATENCY_TIME_IN_MODEL_PREFILL = _attr("gen_ai.latency.time_in_model_prefill", "seconds of prefill",
                                          origin="vLLM")
    LATENCY_TIME_IN_MODEL_DECODE = _attr("gen_ai.latency.time_in_model_decode", "seconds of decode",
                                         origin="vLLM")
    LATENCY_TIME_IN_MODEL_INFERENCE = _attr("gen_ai.latency.time_in_model_inference", "prefill + decode seconds",
                                            origin="vLLM")


class Media:
    TYPE = _attr("mm.type", "kind of media item: image, audio or video")
    HASH = _attr("mm.hash", "content hash of the media item (the encoder cache key)")
    INDEX = _attr("mm.index", "position of the item among the request's media items")
    SIZE_BYTES = _attr("mm.size_bytes", "decoded size of the item")


class Mock:
    """Failures the mocks inject on request (x-mock-failure header or configured rates)."""

    FAILURE = _attr("mock.failure", "the injected failure: 500, 429, context_length, stall, disconnect ...")
    FAILURE_SOURCE = _attr("mock.failure.source", "header or rate: who asked for the failure")
    FAILURE_INJECTED = _event("failure_injected", "a failure was injected into this request",
                              (FAILURE, FAILURE_SOURCE))


class Eppkit:
    MODE = _attr("eppkit.mode", "the integration mode (client span; Envoy's custom tag on its spans)")
    FLOW = _attr("eppkit.flow", "the request flow: aggregated, pd, epd, ttft, multipart or pd-pool")
    TOKENS_RECEIVED = _attr("eppkit.tokens_received", "content pieces the client read")
    PREDICTED_CACHED_TOKENS = _attr("eppkit.kv.predicted_cached_tokens",
                                    "prompt tokens the picker expects the picked pod to hold in its prefix cache "
                                    "(kv-events-scorer: the leading blocks it holds × the block size); the pod's own "
                                    "count is vllm.prefix_cached_tokens")


class Stream:
    FIRST_TOKEN = _event("first_token", "the first content token: received (client) or produced (vllm)")


# -- the client ---------------------------------------------------------------------------------------

class Client:
    ABANDONED = _event("client_abandoned", "the client closed the connection before the answer ended (tests)")
    REQUEST = _span("client.request", Service.CLIENT, "one request, from send to the last byte read (kind CLIENT)",
                    (Eppkit.MODE, Eppkit.FLOW, Http.REQUEST_METHOD, Http.URL_PATH, Http.RESPONSE_STATUS_CODE,
                     Http.PROTOCOL_VERSION, Eppkit.TOKENS_RECEIVED), (Stream.FIRST_TOKEN, ABANDONED))


# -- Envoy -------------------------------------------------------------------------------------------

class Cluster:
    """Envoy cluster names that appear in span names (envoy/*.j2, eppkit/gateway/body_routing.py)."""

    POOL = "pool"  # every backend (per model: pool_<model>)
    PICKED = "picked"  # every picker mode: every backend, the picker's choice (and fallbacks) via override_host
    CALLOUT = "callout"  # the callout service


class Envoy:
    """Names Envoy's OpenTelemetry tracer gives (the kit reads them; Envoy makes them)."""

    UPSTREAM_ADDRESS = _attr("upstream_address", "host:port Envoy sent the request to", origin="Envoy")
    UPSTREAM_CLUSTER = _attr("upstream_cluster", "the cluster of that host", origin="Envoy")
    RESPONSE_FLAGS = _attr("response_flags", "Envoy's response flags (UF, UH, DC, ... or -)", origin="Envoy")
    HTTP_STATUS_CODE = _attr("http.status_code", "the status Envoy answered (its own, older spelling)",
                             origin="Envoy")
    COMPONENT = _attr("component", "proxy, or the filter that made the span", origin="Envoy")
    ERROR = _attr("error", "\"true\" on a failed span: Envoy's tracing turns it into an error status",
                  origin="Envoy")
    INGRESS = _span("ingress", Service.ENVOY, "the downstream request through Envoy, start to end",
                    (UPSTREAM_ADDRESS, UPSTREAM_CLUSTER, RESPONSE_FLAGS, HTTP_STATUS_CODE, Eppkit.MODE),
                    origin="Envoy")
    ROUTER = _span("router {cluster} egress", Service.ENVOY, "one upstream attempt to a backend of {cluster}",
                   (UPSTREAM_ADDRESS, UPSTREAM_CLUSTER, RESPONSE_FLAGS, HTTP_STATUS_CODE, Eppkit.MODE),
                   origin="Envoy")
    EXT_PROC_CALL = _span("async envoy.service.ext_proc.v3.ExternalProcessor.Process egress", Service.ENVOY,
                          "the ext_proc gRPC stream to the EPP (ext_proc, sidecar)",
                          (UPSTREAM_ADDRESS, UPSTREAM_CLUSTER, HTTP_STATUS_CODE, Eppkit.MODE), origin="Envoy")
    CALLOUT_CALL = _span("async callout egress", Service.ENVOY, "the Lua filter's httpCall to the callout service",
                         (UPSTREAM_ADDRESS, UPSTREAM_CLUSTER, HTTP_STATUS_CODE, Eppkit.MODE), origin="Envoy")
    ROUTER_PREFIX = "router "

    @staticmethod
    def router(cluster: str) -> str:
        """Envoy's span of an upstream attempt to ``cluster``: ``router <cluster> egress``."""
        return f"router {cluster} egress"


class Dynmod:
    """The Go dynamic module's own Envoy span (plugins/dynamic_module/internal/callout/filter.go)."""

    OUTCOME = _attr("eppkit.callout.outcome", "picked, rejected, fail-open, unavailable or cancelled")
    ENDPOINT = _attr("eppkit.callout.endpoint", "the endpoint the callout picked")
    PREFILLER = _attr("eppkit.callout.prefiller", "the prefiller the callout picked (pd, epd)")
    ENCODERS = _attr("eppkit.callout.encoders", "the encoders the callout picked (epd)")
    FAILURE = _attr("eppkit.callout.failure", "why the callout failed (fail-open, unavailable)")
    CALLOUT = _span("dynmod callout", Service.ENVOY, "the module's call to the callout service, start to answer",
                    (Envoy.UPSTREAM_CLUSTER, Envoy.COMPONENT, Envoy.HTTP_STATUS_CODE, Envoy.ERROR, OUTCOME, ENDPOINT,
                     PREFILLER, ENCODERS, FAILURE, Eppkit.MODE))


# -- the pickers --------------------------------------------------------------------------------------

class Frontend:
    WORKER_ID = _attr("frontend.worker_id", "the worker the KV router chose")
    ENDPOINT = _attr("frontend.endpoint", "its host:port")
    TOKEN_COUNT = _attr("frontend.token_count", "prompt tokens (also on the EPP's spans in sidecar)")
    OVERLAP_BLOCKS = _attr("frontend.overlap_blocks", "prefix blocks the chosen worker already holds")
    REASON = _attr("frontend.reason", "why that worker")
    ROUTE = _span("frontend.route", Service.FRONTEND, "the KV router's decision for one request (SERVER)",
                  (Http.REQUEST_METHOD, Http.URL_PATH, Http.RESPONSE_STATUS_CODE, GenAi.REQUEST_MODEL, WORKER_ID,
                   ENDPOINT, TOKEN_COUNT, OVERLAP_BLOCKS, REASON, Eppkit.PREDICTED_CACHED_TOKENS))
    TOKENIZE = _span("frontend.tokenize", Service.FRONTEND, "tokenizing the prompt", (TOKEN_COUNT,))


class Decision(NamedTuple):
    """The attributes of a picker's decision, the same under each transport's prefix (``epp.``, ``callout.``)."""

    ENDPOINT: str
    ENDPOINT_NAME: str
    SCORER: str
    REASON: str
    PREFILLER: str
    PREFILLER_NAME: str
    PREFILL_REASON: str
    ENCODERS: str
    ENCODERS_NAMES: str
    ENCODERS_REASON: str


def _decision(prefix: str) -> Decision:
    """A picker's decision attributes under ``prefix``: declared here once for every transport."""
    docs = {"endpoint": "host:port of the picked endpoint", "endpoint.name": "name of the picked endpoint (vllm-0 ...)",
            "scorer": "the scorer that decided", "reason": "why this endpoint, or why none",
            "prefiller": "host:port of the picked prefiller (pd, epd, ttft)",
            "prefiller.name": "its name", "prefill.reason": "why that prefiller",
            "encoders": "comma-separated host:port of the picked encoders (epd)", "encoders.names": "their names",
            "encoders.reason": "why those encoders"}
    return Decision(*(_attr(f"{prefix}.{key}", doc) for key, doc in docs.items()))


class Epp:
    DECISION = _decision("epp")
    (ENDPOINT, ENDPOINT_NAME, SCORER, REASON, PREFILLER, PREFILLER_NAME, PREFILL_REASON, ENCODERS, ENCODERS_NAMES,
     ENCODERS_REASON) = DECISION
    FALLBACKS = _attr("epp.fallbacks", "comma-separated endpoints to try next")
    WORKER_ID = _attr("epp.worker_id", "the frontend's worker id of the pick (sidecar)")
    MESSAGES = _attr("epp.messages", "ext_proc messages sent back to Envoy")
    MULTIPART_BOUNDARY = _attr("epp.multipart.boundary", "the multipart boundary (multipart flow)")
    MULTIPART_METADATA = _attr("epp.multipart.metadata", "the exact part-2 body")
    MULTIPART_METADATA_BYTES = _attr("epp.multipart.metadata_bytes", "its size")
    MULTIPART_TRIGGER = _attr("epp.multipart.trigger", "what released part 2: headers or first-token")
    MULTIPART_PART1_BYTES = _attr("epp.multipart.part1_bytes", "size of part 1 (the request payload)")
    MULTIPART_PART2_BYTES = _attr("epp.multipart.part2_bytes", "size of part 2 and the closing boundary")
    MULTIPART_HELD_MS = _attr("epp.multipart.held_ms", "ms since part 1 left")
    MULTIPART_CHUNK_BYTES = _attr("epp.multipart.chunk_bytes", "size of the first response body chunk")

    PART1_SENT = _event("part1_sent", "part 1 left the EPP (multipart)", (MULTIPART_PART1_BYTES, ENDPOINT))
    RESPONSE_HEADERS_SEEN = _event("response_headers_seen", "the backend's response headers reached the EPP",
                                   (Http.RESPONSE_STATUS_CODE, MULTIPART_HELD_MS))
    FIRST_TOKEN_SEEN = _event("first_token_seen", "the first response body chunk reached the EPP",
                              (MULTIPART_CHUNK_BYTES, MULTIPART_HELD_MS))
    PART2_SENT = _event("part2_sent", "part 2 and the closing boundary left the EPP", (MULTIPART_PART2_BYTES,))
    STREAM_CLOSED_WHILE_HOLDING = _event("stream_closed_while_holding", "the stream ended before part 2 was sent")

    _DECISION = (*DECISION, FALLBACKS, WORKER_ID, Frontend.TOKEN_COUNT, Eppkit.PREDICTED_CACHED_TOKENS)
    PROCESS = _span("epp.process", Service.EPP, "the ext_proc stream of one request, headers to decision (SERVER)",
                    (Rpc.SYSTEM, Rpc.SERVICE, Rpc.METHOD, Http.REQUEST_METHOD, Http.URL_PATH,
                     Http.RESPONSE_STATUS_CODE, Error.TYPE, MULTIPART_BOUNDARY) + _DECISION,
                    (PART1_SENT, RESPONSE_HEADERS_SEEN, FIRST_TOKEN_SEEN, PART2_SENT, STREAM_CLOSED_WHILE_HOLDING))
    PICK = _span("epp.pick", Service.EPP, "the decision: parse the body, run the scorer over the pool",
                 (GenAi.REQUEST_MODEL,) + _DECISION)
    INJECT = _span("epp.inject", Service.EPP, "the answer to Envoy: headers, metadata, body (multipart: part 2)",
                   (ENDPOINT, MESSAGES, MULTIPART_METADATA, MULTIPART_METADATA_BYTES, MULTIPART_BOUNDARY,
                    MULTIPART_TRIGGER))


class EchoEpp:
    MISBEHAVIOUR = _attr("echo_epp.misbehaviour", "the protocol fault it was told to commit (none: it conforms)")
    PROCESS = _span("echo_epp.process", Service.ECHO_EPP, "one ext_proc stream, headers to its end (SERVER)",
                    (Rpc.SYSTEM, Rpc.SERVICE, Rpc.METHOD, Http.REQUEST_METHOD, Http.URL_PATH, Epp.ENDPOINT,
                     Epp.REASON, MISBEHAVIOUR))


class Callout:
    DECISION = _decision("callout")
    (ENDPOINT, ENDPOINT_NAME, SCORER, REASON, PREFILLER, PREFILLER_NAME, PREFILL_REASON, ENCODERS, ENCODERS_NAMES,
     ENCODERS_REASON) = DECISION
    PICK = _span("callout.pick", Service.CALLOUT, "one POST /pick: the decision (SERVER)",
                 (*DECISION, GenAi.REQUEST_MODEL, Http.RESPONSE_STATUS_CODE, Eppkit.PREDICTED_CACHED_TOKENS))


# -- the backends -------------------------------------------------------------------------------------

class Pd:
    SEED = _attr("pd.seed", "the seed P and D share, so decode repeats prefill's first token")
    PREFILLER = _attr("pd.prefiller", "host:port of the prefiller used")
    FLOW = _attr("pd.flow", "PD, P/D or EP/D: which stages ran")
    TRUE_TTFT_MS = _attr("pd.true_ttft_ms", "arrival to the first token forwarded to the client")
    ENCODER = _attr("pd.encoder", "host:port of the encoder of this item")
    ITEM_INDEX = _attr("pd.item_index", "position of the media item")
    FIRST_TOKEN_FROM_PREFILL = _event("first_token_streamed_from_prefill",
                                      "prefill's token went to the client before decode was asked")
    REQUEST = _span("pd.request", Service.PD_SIDECAR, "one request through the sidecar: encode*, prefill, decode",
                    (GenAi.REQUEST_ID, Http.RESPONSE_STATUS_CODE, SEED, PREFILLER, FLOW, TRUE_TTFT_MS),
                    (FIRST_TOKEN_FROM_PREFILL,))
    ENCODE = _span("pd.encode", Service.PD_SIDECAR, "the call to an encoder for one media item",
                   (Media.TYPE, Media.HASH, ENCODER, ITEM_INDEX))
    PREFILL = _span("pd.prefill", Service.PD_SIDECAR, "the prefill request to the prefiller", (PREFILLER,))
    DECODE = _span("pd.decode", Service.PD_SIDECAR, "the decode request to the local decoder, to its last byte")


class Vllm:
    ROLE = _attr("vllm.role", "prefill, decode or both")
    INSTANCE = _attr("vllm.instance", "the instance name (also service.instance.id)")
    STREAM = _attr("vllm.stream", "the request asked for a stream")
    API = _attr("vllm.api", "chat or completion")
    MM_ITEMS = _attr("vllm.mm_items", "media items in the request")
    KV_TRANSFER_PARAMS = _attr("vllm.kv_transfer", "do_remote_decode (a P request) or do_remote_prefill (a D request)")
    MULTIPART = _attr("vllm.multipart", "the request came as multipart (payload now, metadata later)")
    CANCELLED = _attr("vllm.cancelled", "the client went away before the end")
    NUM_REQUESTS_RUNNING = _attr("vllm.num_requests_running", "requests holding a slot when this one got one")
    KV_REMOTE_ENGINE_ID = _attr("vllm.kv_transfer.remote_engine_id", "the prefiller's engine id")
    KV_REMOTE_HOST = _attr("vllm.kv_transfer.remote_host", "the prefiller's host")
    KV_REMOTE_PORT = _attr("vllm.kv_transfer.remote_port", "the prefiller's port")
    KV_NUM_BLOCKS = _attr("vllm.kv_transfer.num_blocks", "KV blocks pulled")
    KV_PROMPT_TOKENS = _attr("vllm.kv_transfer.prompt_tokens", "prompt tokens the blocks hold")
    PREFILL_UNCACHED_TOKENS = _attr("vllm.prefill.uncached_tokens", "prompt tokens computed (not in the cache)")
    PREFIX_CACHED_TOKENS = _attr("vllm.prefix_cached_tokens", "prompt tokens found in the prefix cache")
    EC_CACHE_HITS = _attr("vllm.ec_cache_hits", "media items found in the encoder cache")
    EC_CACHE_MISSES = _attr("vllm.ec_cache_misses", "media items not found there")
    PREFILL_CONFIGURED_MS = _attr("vllm.prefill.configured_ms", "the prefill time the latency model chose")
    DECODE_TOKENS = _attr("vllm.decode.tokens", "tokens decoded")
    MULTIPART_TIMEOUT_MS = _attr("vllm.multipart.timeout_ms", "how long the mock waits for part 2")
    MULTIPART_METADATA_BYTES = _attr("vllm.multipart.metadata_bytes", "size of the part-2 body received")
    MULTIPART_METADATA = _attr("vllm.multipart.metadata", "the part-2 body received (first KiB)")

    SERVER_SHUTDOWN = _event("server_shutdown", "the mock stopped while serving this request")
    STALL_STARTED = _event("stall_started", "an injected stall began (the connection drops after it)")
    INJECTED_DISCONNECT = _event("injected_disconnect", "the mock closed the connection on purpose")
    CLIENT_CANCELLED = _event("client_cancelled", "the client went away; the request was aborted")

    REQUEST = _span("llm_request", Service.VLLM, "one request, arrival to the last token (SERVER)",
                    (ROLE, INSTANCE, GenAi.REQUEST_ID, MULTIPART, Mock.FAILURE, GenAi.RESPONSE_MODEL,
                     GenAi.USAGE_PROMPT_TOKENS, GenAi.REQUEST_N, STREAM, API, GenAi.REQUEST_MAX_TOKENS,
                     GenAi.REQUEST_TEMPERATURE, GenAi.REQUEST_TOP_P, MM_ITEMS, KV_TRANSFER_PARAMS,
                     GenAi.USAGE_COMPLETION_TOKENS, GenAi.USAGE_NUM_SEQUENCES, GenAi.LATENCY_TIME_IN_QUEUE,
                     GenAi.LATENCY_TIME_TO_FIRST_TOKEN, GenAi.LATENCY_E2E, GenAi.LATENCY_TIME_IN_MODEL_PREFILL,
                     GenAi.LATENCY_TIME_IN_MODEL_DECODE, GenAi.LATENCY_TIME_IN_MODEL_INFERENCE,
                     GenAi.RESPONSE_FINISH_REASONS, Error.TYPE, Http.RESPONSE_STATUS_CODE, CANCELLED),
                    (Mock.FAILURE_INJECTED, Stream.FIRST_TOKEN, SERVER_SHUTDOWN, STALL_STARTED,
                     INJECTED_DISCONNECT, CLIENT_CANCELLED), origin="vLLM")
    QUEUE = _span("vllm.queue", Service.VLLM, "waiting for a scheduler slot", (NUM_REQUESTS_RUNNING,))
    PREFILL = _span("vllm.prefill", Service.VLLM, "computing the prompt's KV (absent when KV is pulled)",
                    (PREFILL_UNCACHED_TOKENS, PREFIX_CACHED_TOKENS, EC_CACHE_HITS, EC_CACHE_MISSES,
                     PREFILL_CONFIGURED_MS))
    KV_TRANSFER = _span("vllm.kv_transfer", Service.VLLM, "pulling the prompt's KV from the prefiller (D of P/D)",
                        (KV_REMOTE_ENGINE_ID, KV_REMOTE_HOST, KV_REMOTE_PORT, KV_NUM_BLOCKS, KV_PROMPT_TOKENS))
    DECODE = _span("vllm.decode", Service.VLLM, "generating the tokens after the first", (DECODE_TOKENS,))
    AWAIT_METADATA = _span("vllm.await_metadata", Service.VLLM,
                           "multipart: waiting for part 2 after the first token",
                           (MULTIPART_TIMEOUT_MS, MULTIPART_METADATA_BYTES, MULTIPART_METADATA))


class Encoder:
    INSTANCE = _attr("encoder.instance", "the encoder's instance name")
    CACHE_HIT = _attr("encoder.cache_hit", "the item was in the encoder cache")
    CONFIGURED_MS = _attr("encoder.configured_ms", "the encode time the latency model chose")
    ENCODE = _span("encoder.encode", Service.ENCODER, "encoding one media item",
                   (Media.TYPE, Media.HASH, Media.INDEX, Media.SIZE_BYTES, INSTANCE, GenAi.REQUEST_ID, CACHE_HIT,
                    CONFIGURED_MS, Mock.FAILURE), (Mock.FAILURE_INJECTED,))


ENTRIES: tuple[Entry, ...] = declared()

_BY_KIND: dict[str, dict[str, Entry]] = {}
for _e in ENTRIES:
    _BY_KIND.setdefault(_e.kind, {})[_e.name] = _e


def entries(kind: str) -> dict[str, Entry]:
    """Every entry of one kind (SERVICE, RESOURCE, SPAN, EVENT, ATTRIBUTE), by name."""
    return dict(_BY_KIND.get(kind, {}))


def span(name: str) -> Entry | None:
    """The span entry ``name`` is (exactly, or by its pattern: ``router pool egress``)."""
    spans = _BY_KIND[SPAN]
    if name in spans:
        return spans[name]
    return next((e for e in spans.values() if e.pattern is not None and e.pattern.match(name)), None)


def service_of(span_name: str) -> str:
    """The service that emits ``span_name``; KeyError naming the known spans when it is not declared."""
    entry = span(span_name)
    if entry is None:
        raise KeyError(f"span {span_name!r} is not in the trace contract; declared: {', '.join(_BY_KIND[SPAN])}")
    return entry.service
