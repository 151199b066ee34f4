"""The backend registry: one entry per kind of inference server behind the pickers, each in its own module of
this package (``mock``, ``inference_sim``, ``real_vllm``, ``urls``) or an outside package's (entry point group
``eppkit.backends``). Everything else asks the entry and never switches on a kind's name.

An entry says what the kit starts for one server of the topology (``server``: a
:class:`~eppkit.plan.ServiceSpec`; None when the kit starts nothing, as for servers given by URL), which spans it
puts into a trace, how it is installed (``eppkit bootstrap --backend``) and checked before anything starts, what
it cannot do (a flow, a pod address of its own), and whether its servers are started once and shared
(``shared``: the pytest plugin and ``eppkit compare`` start a real vLLM once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from eppkit.core.registry import Registry
from eppkit.plan import ServiceSpec
from eppkit.services.vllm.config import MockLatency

if TYPE_CHECKING:
    from eppkit.backends import Backend


class FlowNeeds(Protocol):
    """What a backend is checked against: a flow's registry entry (eppkit.flows.Flow)."""

    name: str
    mock_only: str  # why the flow needs the kit's mock ("": it does not)
    disaggregated: bool  # separate prefill and decode servers


@dataclass(frozen=True)
class Server:
    """One server a flow asks the backend for: its name and role, the model it serves, where it listens (a pod
    address of its own, or 127.0.0.1), its place among the topology's servers, and the topology's knobs."""

    name: str
    role: str  # both, prefill, decode
    model: str
    host: str
    port: int
    index: int = 0
    seed: int = 0
    latency: MockLatency = field(default_factory=MockLatency)
    extra: tuple[str, ...] = ()  # the topology's extra flags for it
    command: str = ""  # Backend.command: a server of yours by its command line


def _nothing(*_args) -> None:
    return None


@dataclass(frozen=True)
class BackendKind:
    name: str  # what --backend names (a preset), or "urls"
    order: int  # position in listings
    describe: str  # for --backend's help: what it is and how to get it
    default_spans: str  # which spans it emits by default (eppkit.observability.expected_spans.BACKEND_SPANS)
    label: Callable[["Backend"], str]  # what it is, in reports: "the kit's mock vLLM", "external: ..."
    server: Callable[[Server], ServiceSpec] | None = None  # what the kit starts for one server; None: nothing
    preset: bool = True  # named by --backend (the kit starts its servers); False: given by URL
    all_interfaces: bool = False  # it binds every interface: its port is chosen free on all of them
    pod_addresses: str = ""  # why it cannot listen on a pod address of its own ("": it can)
    aggregated_only: str = ""  # why it serves no disaggregated flow ("": it does)
    one_per_pod: str = ""  # why one server cannot serve many pods (pods_per_mock > 1; "": it can)
    shared: bool = False  # its servers start once per session (pytest) or run (compare) and testbeds share them
    own_command: bool = False  # it can start a command of the user's (--vllm-command) or use servers already running
    install: Callable[[Callable[[str], object]], str] | None = None  # eppkit bootstrap --backend NAME: where it is
    # bootstrap runs its install beside the long compiles (GAIE's, Kubernetes'): a download, or a build that fills
    # the core they leave idle at times
    install_beside: bool = False
    require: Callable[["Backend"], None] = _nothing  # FileNotFoundError saying how to get it, before anything starts
    check_pool: Callable[["Backend", int], None] = _nothing  # ValueError when that many servers cannot run here
    validate: Callable[["Backend", FlowNeeds], None] = _nothing  # ValueError naming what its options get wrong


BACKENDS: Registry[BackendKind] = Registry("backend")
register = BACKENDS.register
get = BACKENDS.get


def presets() -> tuple[str, ...]:
    """What --backend names: the kinds whose servers the kit starts."""
    return tuple(kind.name for kind in BACKENDS.all() if kind.preset)
