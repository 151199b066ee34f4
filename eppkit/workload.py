"""Seeded workloads and a bounded driver that sends them through a testbed.

A *scenario* says what the requests look like (prompt length, output length, streaming,
images) and which flow serves them. ``plan_requests(scenario, count, seed)`` turns it into
the same list of request bodies every time, so every mode of a comparison gets exactly the
same requests. ``Driver`` sends them with at most ``concurrency`` in flight, at most
``rate`` per second (0: as fast as the slots free up), and stops dispatching at
``max_duration_s``; every request has its own timeout, so a run is bounded in count and time.

Each request goes through :class:`eppkit.observability.client.TracedClient`, so it is the root span
(``client.request``) of its own trace and carries ``traceparent``.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from eppkit.core.flags import flag_field
from eppkit.services.picker.headers import OBJECTIVE

if TYPE_CHECKING:  # types only: the client loads OTel's exporter, which the CLI must not before bootstrap
    from eppkit.observability.client import ClientResult, TracedClient

MODEL = "mock-llm"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    flow: str  # the flow that serves it (eppkit.flows)
    stream: bool
    prompt_words: tuple[int, int]  # inclusive range, drawn per request
    max_tokens: tuple[int, int]
    media_items: tuple[int, int] = (0, 0)  # images per request (epd)
    image_bytes: tuple[int, int] = (2048, 8192)
    # Prompt sizes in KiB, one per request in turn (request i: prompt_kb[i % len]); prompt_words then only bounds
    # them. Empty: the prompt is prompt_words long.
    prompt_kb: tuple[int, ...] = ()
    # Conversations that share a system prompt: this many system prompts of prompt_words words, request i under
    # system prompt i % shared_prefixes, its own question after it (what a prefix-cache-aware picker is for). 0: none.
    shared_prefixes: int = 0
    # The context window the servers need (their --max-model-len, the flag vLLM, the simulator and the mock share);
    # None: their default.
    max_model_len: int | None = None
    # Each server's KV-cache capacity in blocks (--kv-cache-size: the mock's and the simulator's knob; a real vLLM
    # sizes its own), small enough to evict; None: their default.
    kv_cache_blocks: int | None = None
    # Priority bands, request i in bands[i % len]: each (InferenceObjective, its priority), the objective named in
    # GAIE's header (x-gateway-inference-objective) and made in the testbed's control plane. (): no header.
    bands: tuple[tuple[str, int], ...] = ()
    # Requests each server runs at once (--max-num-seqs: the mock's, the simulator's, vLLM's); the rest wait in its
    # queue. None: their default.
    max_num_seqs: int | None = None
    # Requests in flight per pod at least, whatever --concurrency says (a sweep's steps as given): what saturates the
    # pool. 0: --concurrency.
    in_flight_per_pod: int = 0


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("chat", "short chat: a few dozen words in, 8-24 tokens out, one JSON answer",
             "aggregated", False, (8, 40), (8, 24)),
    Scenario("long-prompt", "long prompt: 2,000-4,000 words (15-30 KB body) in, 8-16 tokens out",
             "aggregated", False, (2000, 4000), (8, 16)),
    Scenario("stream", "streaming chat: a few dozen words in, 16-32 tokens out as SSE",
             "aggregated", True, (8, 40), (16, 32)),
    Scenario("multimodal", "E/P/D: 1-3 images per request, encoders then prefill then decode",
             "epd", False, (8, 30), (8, 16), media_items=(1, 3)),
    Scenario("pd", "P/D: prefill on P, KV transfer, decode on D",
             "pd", False, (20, 200), (8, 24)),
    Scenario("shared-prefix", "4 conversations, each a system prompt of 300-400 words of its own, a short question "
             "after it, in turn: where a prefix-cache-aware picker sends them (the prefix-cache table)",
             "aggregated", False, (300, 400), (4, 8), shared_prefixes=4),
    Scenario("shared-prefix-evicting", "8 conversations of 300-400-word system prompts on pods that keep 64 KV blocks "
             "each (the mock's and the simulator's --kv-cache-size): the blocks are evicted as conversations take "
             "turns, so a prediction of where they are goes stale unless the picker hears the evictions",
             "aggregated", False, (300, 400), (4, 8), shared_prefixes=8, kv_cache_blocks=64),
    Scenario("prompt-sizes", "prompts of 1, 4, 16, 64 and 256 KiB in turn, 8-16 tokens out as SSE: TTFT and the "
             "EPP hop per prompt size (the curve of report.html)",
             "aggregated", True, (100, 50_000), (8, 16), prompt_kb=(1, 4, 16, 64, 256), max_model_len=65536),
    Scenario("saturated", "past saturation: pods that run 2 requests at a time (--max-num-seqs 2), 12 in flight per "
             "pod, a critical band (priority 1) and a sheddable one (priority -1) in turn, 8-16 tokens out as SSE: the "
             "kit's EPP shedding beside it queueing (flow control), TTFT and drops per band (the per-band table)",
             "aggregated", True, (8, 40), (8, 16), bands=(("critical", 1), ("sheddable", -1)), max_num_seqs=2,
             in_flight_per_pod=12),
)}

PROMPT_WORDS = (
    "the a of to and in on for with about from into over under after before between through "
    "model token cache prefill decode route gateway envoy picker endpoint request answer prompt "
    "river mountain city light shadow garden window letter signal market engine bridge forest "
    "quick slow bright quiet early late small large warm cold green blue golden silver ancient "
    "explain describe compare summarize list imagine write translate measure predict choose "
    "why how when where which what whose while because although unless until since "
    "server cluster latency throughput memory network kernel thread queue batch stream bytes"
).split()


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    body: dict
    prompt_words: int
    media_items: int
    prompt_kb: int | None = None  # the size it was made to (a scenario with prompt_kb)
    band: str | None = None  # its priority band's InferenceObjective (a scenario with bands), named in ``headers``
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


def _image_url(rng: random.Random, size: int) -> str:
    raw = rng.randbytes(size)
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def plan_requests(scenario: Scenario, count: int, seed: int = 0, *, stream: bool | None = None) -> list[PlannedRequest]:
    """``count`` request bodies for ``scenario``; the same ``seed`` always gives the same list.

    ``stream`` overrides the scenario's choice when not None.
    """
    if count < 0:
        raise ValueError("count cannot be negative")
    rng = random.Random(f"eppkit-workload:{scenario.name}:{seed}")
    systems = [" ".join(rng.choice(PROMPT_WORDS) for _ in range(rng.randint(*scenario.prompt_words)))
               for _ in range(scenario.shared_prefixes)]
    out = []
    for i in range(count):
        kb = scenario.prompt_kb[i % len(scenario.prompt_kb)] if scenario.prompt_kb else None
        if kb is None:
            words = rng.randint(*scenario.prompt_words)
            text = " ".join(rng.choice(PROMPT_WORDS) for _ in range(words))
        else:
            text = _text_of(rng, kb * 1024)
            words = len(text.split())
        items = rng.randint(*scenario.media_items)
        if items:
            content: str | list = [{"type": "text", "text": text}] + [
                {"type": "image_url", "image_url": {"url": _image_url(rng, rng.randint(*scenario.image_bytes))}}
                for _ in range(items)]
        else:
            content = text
        messages = [{"role": "user", "content": content}]
        if systems:
            question = " ".join(rng.choice(PROMPT_WORDS) for _ in range(rng.randint(5, 12)))
            messages = [{"role": "system", "content": systems[i % len(systems)]}, {"role": "user", "content": question}]
            words = len(systems[i % len(systems)].split())
        body = {
            "model": MODEL,
            "messages": messages,
            "max_tokens": rng.randint(*scenario.max_tokens),
            "stream": scenario.stream if stream is None else stream,
            "seed": rng.randrange(2**31),
        }
        band = scenario.bands[i % len(scenario.bands)][0] if scenario.bands else None
        out.append(PlannedRequest(i, body, words, items, kb, band, {OBJECTIVE: band} if band else {}))
    return out


def _text_of(rng: random.Random, size: int) -> str:
    """Words drawn until the text is ``size`` bytes (cut at a word's end, so a few bytes over)."""
    parts, length = [], -1
    while length < size:
        word = rng.choice(PROMPT_WORDS)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)


# -- results -----------------------------------------------------------------------------------

@dataclass
class Sample:
    """One sent request as the client saw it."""

    index: int
    trace_id: str
    status: int
    error: str | None  # kind (see classify) or None when the request succeeded
    detail: str | None  # the client's error text or an excerpt of the error body
    sent_s: float  # since the workload's start
    e2e_ms: float
    ttft_ms: float | None
    tokens: int
    media_items: int
    pod: str | None = None
    # Streamed answers: time per output token after the first, and every gap between two tokens' arrivals
    # (ClientResult.tpot_ms / itl_ms); None when not streamed.
    tpot_ms: float | None = None
    itl_ms: list[float] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class WorkloadResult:
    planned: int
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    stopped: str | None = None  # why dispatching stopped early ("max duration 60 s reached"), or None

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    def errors(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.samples:
            if s.error:
                out[s.error] = out.get(s.error, 0) + 1
        return dict(sorted(out.items()))


def classify(result: ClientResult, stream: bool) -> str | None:
    """An error kind for a finished request, or None when it succeeded.

    ``timeout``, ``connection``, ``stream_broken`` (the connection ended mid-answer),
    ``bad_sse``, ``client_error`` (other client-side failures), ``http_<status>``,
    ``stream_incomplete`` (no ``data: [DONE]``), ``empty_answer``.
    """
    if result.error:
        text = result.error
        if "Timeout" in text.split(":", 1)[0]:
            return "timeout"
        if text.startswith("ChunkedEncodingError"):
            return "stream_broken"
        if text.startswith("ConnectionError"):
            return "connection"
        if text.startswith("bad SSE"):
            return "bad_sse"
        return "client_error"
    if result.status != 200:
        return f"http_{result.status}"
    if stream and not (result.events and result.events[-1] == {"done": True}):
        return "stream_incomplete"
    if not result.text:
        return "empty_answer"
    return None


def _tokens(result: ClientResult) -> int:
    if result.tokens:
        return len(result.tokens)
    if isinstance(result.body, dict):
        usage = result.body.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            return usage["completion_tokens"]
    return 0


def failure_detail(result: ClientResult) -> str | None:
    """What a failed request was told: the client's error, or an excerpt of the error body (Envoy's local reply names
    its reason); None when it was answered 200."""
    if result.error:
        return result.error[:300]
    if result.status != 200:
        return str(result.body)[:300]
    return None


# -- driver --------------------------------------------------------------------------------------

def _acquire_before(slots: threading.Semaphore, deadline: float) -> bool:
    """Take a slot, waiting in short slices; False (holding none) once ``deadline`` has passed."""
    while time.monotonic() < deadline:
        if slots.acquire(timeout=min(0.1, max(0.001, deadline - time.monotonic()))):
            if time.monotonic() < deadline:
                return True
            slots.release()
            return False
    return False


Progress = Callable[[int, int, int, float], None]  # done, total, errors, elapsed_s


@dataclass(frozen=True)
class Load:
    """How much a run sends, how fast and for how long: a :class:`Driver`'s bounds and ``eppkit compare``'s
    workload flags (made from these fields by eppkit.options)."""

    requests: int = flag_field(60, "measured requests per mode and scenario")
    concurrency: int = flag_field(4, "requests in flight at most")
    rate: float = flag_field(0.0, "requests per second, 0 = no limit")
    max_duration_s: float = flag_field(60.0, "seconds per mode and scenario after which no request is sent",
                                       flag="--max-duration")
    warmup: int = flag_field(2, "uncounted requests first")
    request_timeout_s: float = flag_field(30.0, "seconds per request", flag="--request-timeout")

    def validate(self) -> "Load":
        """ValueError on a load that would not be bounded or makes no sense."""
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.rate < 0:
            raise ValueError("rate cannot be negative")
        if self.max_duration_s <= 0:
            raise ValueError("max_duration_s must be positive")
        return self


MAX_SWEEP_STEPS = 8


def concurrency_steps(value: str | Sequence[int]) -> tuple[int, ...]:
    """A concurrency sweep's steps from a comma list (``"16,1,4"``) or the numbers themselves: distinct, ascending,
    each at least 1, at most :data:`MAX_SWEEP_STEPS` of them; ValueError naming ``--concurrency-sweep`` on anything
    else."""
    try:
        found = sorted({int(v) for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()})
    except ValueError:
        raise ValueError(f"--concurrency-sweep {value!r}: a comma list of whole numbers, e.g. 1,4,16,32") from None
    if not found or found[0] < 1 or len(found) > MAX_SWEEP_STEPS:
        raise ValueError(f"--concurrency-sweep {value!r}: 1 to {MAX_SWEEP_STEPS} concurrencies, each at least 1")
    return tuple(found)


class Driver:
    """Sends planned requests with bounded concurrency, rate and duration.

    ``client`` is shared by the worker threads (``requests`` sessions and OTel tracers are
    thread-safe for this use; each request's span context is per thread). ``protocols``: the client protocols
    (``http/1.1``, ``h2c``) in turn, request ``i`` in ``protocols[i % len]``; none: the client's default.
    """

    def __init__(self, client: TracedClient, load: Load = Load(), *, on_progress: Progress | None = None,
                 protocols: Sequence[str] = ()):
        self.client = client
        self.load = load.validate()  # its requests and warmup are the plan's business, not the driver's
        self.on_progress = on_progress
        self.protocols = tuple(protocols)
        self._halted: str | None = None

    def halt(self, reason: str) -> None:
        """Send no more requests (those in flight finish): ``reason`` becomes the result's ``stopped`` (from
        ``on_progress``, when what was sent already says enough)."""
        self._halted = self._halted or reason

    def send_one(self, request: PlannedRequest, t0: float) -> Sample:
        sent = time.monotonic() - t0
        how: dict = {"protocol": self.protocols[request.index % len(self.protocols)]} if self.protocols else {}
        if request.headers:
            how["headers"] = request.headers
        result = self.client.chat(request.body, timeout_s=self.load.request_timeout_s, **how)
        return Sample(
            index=request.index, trace_id=result.trace_id, status=result.status,
            error=classify(result, request.stream), detail=failure_detail(result), sent_s=round(sent, 4),
            e2e_ms=round(result.e2e_ms, 3), ttft_ms=None if result.ttft_ms is None else round(result.ttft_ms, 3),
            tokens=_tokens(result), media_items=request.media_items, pod=result.headers.get("x-inference-pod"),
            tpot_ms=None if result.tpot_ms is None else round(result.tpot_ms, 3),
            itl_ms=[round(gap, 3) for gap in result.itl_ms] if result.token_times_s else None,
        )

    def run(self, requests: Sequence[PlannedRequest]) -> WorkloadResult:
        out = WorkloadResult(planned=len(requests))
        lock = threading.Lock()
        slots = threading.BoundedSemaphore(self.load.concurrency)
        t0 = time.monotonic()
        deadline = t0 + self.load.max_duration_s

        def report() -> None:
            if self.on_progress is not None:
                with lock:
                    done, errors = len(out.samples), sum(1 for s in out.samples if s.error)
                self.on_progress(done, len(requests), errors, time.monotonic() - t0)

        def work(request: PlannedRequest) -> None:
            try:
                try:
                    sample = self.send_one(request, t0)
                except Exception as exc:  # a bug in the client must not hang the run: count it
                    sample = Sample(request.index, "", 0, "client_error", f"{type(exc).__name__}: {exc}"[:300],
                                    round(time.monotonic() - t0, 4), 0.0, None, 0, request.media_items)
                with lock:
                    out.samples.append(sample)
                report()
            finally:
                slots.release()

        report()
        with ThreadPoolExecutor(max_workers=self.load.concurrency, thread_name_prefix="eppkit-workload") as pool:
            interrupted = True
            try:
                for i, request in enumerate(requests):
                    if self._halted:
                        out.stopped = f"{self._halted}: stopped after {i} of {len(requests)} requests"
                        break
                    if self.load.rate > 0:
                        wait = t0 + i / self.load.rate - time.monotonic()
                        if wait > 0:
                            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
                    if not _acquire_before(slots, deadline):
                        out.stopped = f"max duration {self.load.max_duration_s:g} s reached after {i} of {len(requests)} requests"
                        break
                    pool.submit(work, request)
                interrupted = False
            finally:
                # In-flight requests finish (each bounded by its timeout); on Ctrl-C queued ones are dropped.
                pool.shutdown(wait=True, cancel_futures=interrupted)
        out.wall_s = time.monotonic() - t0
        out.samples.sort(key=lambda s: s.index)
        report()
        return out
