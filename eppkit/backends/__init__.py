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

Each kind is one module of this package that registers a :class:`~eppkit.backends.registry.BackendKind`
(``mock``, ``inference_sim``, ``real_vllm``, ``urls``); an outside package adds one through the ``eppkit.backends``
entry point group (docs/bring-your-own-backend.md, "Adding a backend").
"""

from __future__ import annotations

from dataclasses import dataclass

from eppkit.backends import registry
from eppkit.backends.registry import BACKENDS, BackendKind, FlowNeeds, Server
from eppkit.core.registry import load_members
from eppkit.observability.expected_spans import BACKEND_SPANS
from eppkit.plan import Endpoint

# The kinds the kit ships, by name (their modules: mock, inference_sim, real_vllm, urls).
MOCK = "mock"
SIM = "llm-d-inference-sim"
VLLM = "vllm"
URLS = "urls"


class BackendMissing(FileNotFoundError):
    """A preset the kit starts is not built or installed (or half-installed); the message says how to get it."""


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
        raise TypeError(f"backend must be a Backend or a preset name ({', '.join(registry.presets())}), got {value!r}")

    @property
    def kind(self) -> str:
        return URLS if (self.urls or self.prefill_urls or self.decode_urls) else self.preset

    @property
    def entry(self) -> BackendKind:
        """Its kind's registry entry (eppkit.backends.registry)."""
        return BACKENDS.get(self.kind)

    @property
    def external(self) -> bool:
        """Not the kit's mock: no x-mock-* steering, no mock spans."""
        return self.kind != MOCK

    @property
    def emits(self) -> str:
        """Which spans it puts into a trace (BACKEND_SPANS)."""
        return self.spans or self.entry.default_spans

    @property
    def label(self) -> str:
        return self.entry.label(self)

    def validate(self, flow: FlowNeeds, pod_addresses: bool = False) -> None:
        """ValueError naming what cannot work for ``flow`` (its registry entry, eppkit.flows.Flow), in a mode
        that puts each pod on its own loopback address (``pod_addresses``: its EPP watches an InferencePool,
        eppkit.modes.Mode.watches_pool)."""
        if self.preset not in registry.presets():
            raise ValueError(f"unknown backend {self.preset!r}; choose one of {', '.join(registry.presets())}, "
                             "or give URLs")
        if self.spans is not None and self.spans not in BACKEND_SPANS:
            raise ValueError(f"backend spans {self.spans!r}: choose one of {', '.join(BACKEND_SPANS)}")
        kind = self.entry
        if (self.command or self.running) and not kind.own_command:
            takes = " or ".join(f"--backend {k.name}" for k in registry.BACKENDS.all() if k.own_command)
            raise ValueError(f"a command of your own is for {takes} (got --backend {self.preset})")
        if pod_addresses and kind.pod_addresses:
            can = " or ".join(k.name for k in registry.BACKENDS.all() if k.preset and not k.pod_addresses)
            raise ValueError(f"this mode puts each pod on its own loopback address, and {kind.pod_addresses}: "
                             f"use --backend {can} there")
        if self.external and flow.mock_only:
            raise ValueError(f"--flow {flow.name} needs the kit's mock vLLM as backend ({flow.mock_only}); "
                             f"got {self.label}")
        if kind.aggregated_only and flow.disaggregated:
            raise ValueError(f"--flow {flow.name}: the {kind.name} preset serves aggregated requests only "
                             f"({kind.aggregated_only})")
        kind.validate(self, flow)

    def require_installed(self) -> None:
        """BackendMissing, saying which command fixes it, when the servers this backend starts are not there:
        llm-d-inference-sim not built, the vllm preset not (or half) installed. Checked before anything starts."""
        try:
            self.entry.require(self)
        except FileNotFoundError as exc:
            raise BackendMissing(str(exc)) from None

    @property
    def starts_servers(self) -> bool:
        """The kit starts its servers (False: given by URL, or a shared preset's, already running)."""
        return self.entry.server is not None and not self.running

    def server(self, server: Server):
        """What the kit starts for one of its servers (a ServiceSpec)."""
        return self.entry.server(server)

    def running_endpoints(self) -> list[Endpoint]:
        """The preset's servers already started (``running``), as endpoints (role both)."""
        return [parse_url(spec, resolve=False) for spec in self.running]

    def endpoints(self, role: str) -> list[Endpoint]:
        """The URL servers of one role (``both``: --backend-url, ``prefill``, ``decode``) as endpoints,
        each asked ``GET /v1/models`` (it must answer; a server without ``@model`` serves the first listed)."""
        specs = {"both": self.urls, "prefill": self.prefill_urls, "decode": self.decode_urls}[role]
        return [with_model(parse_url(spec, role=role)) for spec in specs]


def installable() -> tuple[str, ...]:
    """The presets ``eppkit bootstrap --backend`` builds or installs."""
    return tuple(kind.name for kind in BACKENDS.all() if kind.install is not None)


def install_preset(name: str, progress=print) -> str:
    """Build or install a preset's servers into the cache (``eppkit bootstrap --backend NAME``); where they are."""
    kind = BACKENDS.get(name)
    if kind.install is None:
        raise ValueError(f"no preset {name!r} to install; choose {' or '.join(installable())}")
    return kind.install(progress)


def presets() -> tuple[str, ...]:
    """What --backend names (the kinds whose servers the kit starts), in listing order."""
    return registry.presets()


def default_spans(kind: str) -> str:
    return BACKENDS.get(kind).default_spans


load_members(__name__, __path__, group="backends", skip=("registry",))

# Names others import from here, once every kind is loaded.
from eppkit.backends import inference_sim, real_vllm  # noqa: E402,F401
from eppkit.backends.urls import check_seed, parse_url, served_models, with_model  # noqa: E402,F401
