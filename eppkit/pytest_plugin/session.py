"""The plugin's options (made from the kit's one options table, eppkit.options), its markers, and what a
session's options put into every topology that leaves them open: the runtimes, the backend, the Envoy
version, an external EPP."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from eppkit.core import settings
from eppkit.pytest_plugin.parallel import refuse_under_xdist, session_tag
from eppkit.pytest_plugin.state import CLUSTER, IN_CI, RUNTIMES, SESSION_TAG, require

if TYPE_CHECKING:
    from eppkit.backends import Backend
    from eppkit.topology import Topology

MARKERS = (
    "e2e: drives the real Envoy and the real Jaeger",
    "eppkit_topology(**fields): the Topology the eppkit_testbed fixture starts",
    "eppkit_needs_mock(reason): needs the kit's mock vLLM (x-mock-* headers, its spans or faults); skipped with the "
    "reason against another --eppkit-backend",
    "eppkit_alone(reason): runs while no other test of the run runs (timing assertions, load); under pytest-xdist "
    "the other workers wait",
    "eppkit_runtime_contract(reason): part of the runtime contract: it depends on the runtime (containers, logs, "
    "cleanup, ...), so with --eppkit-other-runtimes contract it runs on every selected runtime, where an unmarked "
    "test runs on the first one only",
    "eppkit_runtimes(*names): runs on these runtimes only (e.g. what tests the kubernetes runtime's own machinery); "
    "deselected on the others, never skipped",
    "eppkit_share_per(*params): under pytest-xdist, the module's tests that use eppkit_shared_testbed_factory are "
    "grouped per runtime and per value of these parameters (default: per runtime)",
    "eppkit_prepare(*names): the test's testbeds run these first-use builds (gaie-epp: GAIE's EPP; control-plane: "
    "etcd and kube-apiserver) or what a testbed of these modes runs (gaie-epp: both); what is missing is built once "
    "before the session's first test, outside every test's timeout (an eppkit_topology marker or the "
    "eppkit_control_plane fixture says so on its own)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    from eppkit.pytest_plugin.options import add_pytest_options

    add_pytest_options(parser)


def values(config: pytest.Config):
    """The session's option values under their table names (eppkit.pytest_plugin.options.PluginValues)."""
    from eppkit.pytest_plugin.options import PluginValues

    return PluginValues(config)


def pytest_configure(config: pytest.Config) -> None:
    ok, why = protos_ok()
    if not ok:  # before any test module imports the OTLP exporter and dies of it
        raise pytest.UsageError(
            f"opentelemetry-proto is broken ({why}): xds-protos overwrote its files. "
            "Hint: run 'eppkit bootstrap' (it repairs that and builds Jaeger and the dynamic module).")
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    tag = session_tag(config)
    try:  # every EPPKIT_* variable, read once now: one the kit cannot use is a usage error naming it
        settings.given(test_session=tag)
    except settings.SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    # The one write into this process's environment the kit makes, and why: every process this session starts
    # carries the tag, the session's leak check finds them by it in /proc. That includes what the kit does not
    # spawn itself (a CLI a test runs with subprocess, and what that CLI starts), so no spawn environment of the
    # kit's can carry it: only the session's own environment, which they all inherit.
    os.environ[SESSION_TAG] = tag
    given = values(config)
    if given.runs:
        settings.given(runs=Path(given.runs).resolve())  # what the kit starts gets it in its spawn environment
    if given.kubeconfig or given.image_registry:  # the kubernetes runtime's cluster: one handle, made here in each
        from eppkit.cluster import handle  # process of the session (a pytest-xdist worker runs this too), passed down

        try:
            config.stash[CLUSTER] = handle.named(given.kubeconfig, given.image_registry)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    if given.keep_on_failure and IN_CI:
        raise pytest.UsageError("--eppkit-keep-on-failure waits for Ctrl-C; it makes no sense with CI=true")
    if given.keep_on_failure:
        refuse_under_xdist(config, "--eppkit-keep-on-failure", "waits on the terminal for Ctrl-C at the first failure")
    try:  # the runtimes, read once here; a bad ini key is a usage error before anything starts (a bad flag: pytest's)
        config.stash[RUNTIMES] = given.runtime
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"--eppkit-runtime (or the ini key eppkit_runtime): {exc}") from None
    from eppkit.options import OTHER_RUNTIMES

    if given.other_runtimes not in OTHER_RUNTIMES:  # the ini key is read as it is written
        raise pytest.UsageError(f"eppkit_other_runtimes {given.other_runtimes!r}: choose from {', '.join(OTHER_RUNTIMES)}")
    try:  # so is a bad backend
        from eppkit import flows

        session_backend(config).validate(flows.get("pd" if given.prefill_urls else "aggregated"))
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"--eppkit-backend*: {exc}") from None
    envoy_version(config)  # and so is a bad --eppkit-envoy-version


def protos_ok() -> tuple[bool, str]:
    """pip may leave xds-protos's old copy of opentelemetry/proto over opentelemetry-proto's files."""
    try:
        from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope  # noqa: F401
    except ImportError as exc:
        return False, str(exc)
    return True, ""


def session_backend(config: pytest.Config) -> "Backend":
    """The backend the ``--eppkit-backend*`` options name (the kit's mock by default)."""
    from eppkit.options import backend

    return backend(values(config))


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("eppkit_needs_mock")
    if marker is None:
        return
    backend = session_backend(item.config)
    if backend.external:  # by design, not a missing prerequisite: the test checks the mock itself
        why = marker.args[0] if marker.args else marker.kwargs.get("reason", "it checks the mock's own behaviour")
        pytest.skip(f"needs the kit's mock vLLM ({why}); this session's backend is {backend.label}")


def require_simulator() -> None:
    """llm-d-inference-sim is built (:func:`require`: a skip on a laptop, a failure in CI)."""
    from eppkit.backends import inference_sim

    require(inference_sim.find() is not None, inference_sim.MISSING)


def require_control_plane() -> None:
    """etcd and kube-apiserver are built, or Go is there to build them (:func:`require`)."""
    import shutil

    from eppkit.builds import controlplane

    require(controlplane.find() is not None or shutil.which("go") is not None, controlplane.missing_message())


def envoy_version(config: pytest.Config) -> str | None:
    """--eppkit-envoy-version (or the ini key): the Envoy of testbeds whose Topology names none."""
    from eppkit.gateway.versions import EnvoyVersionError, check_version_string

    value = values(config).envoy_version
    if not value:
        return None
    try:
        return check_version_string(value)
    except EnvoyVersionError as exc:
        raise pytest.UsageError(str(exc)) from None


def session_epp(config: pytest.Config, topology: Topology) -> Topology:
    """``topology`` with the session's external EPP (``--eppkit-epp-*``) when it is one and names none of its own."""
    from eppkit.modes import external_epp
    from eppkit.options import epp_options

    given = epp_options(values(config))
    if (given and topology.mode == external_epp.MODE.name
            and not any(topology.options.get(k) for k in ("epp_command", "epp_address"))):
        topology = dataclasses.replace(topology, options={**given, **topology.options})  # its own win
    return topology


class SessionServers:
    """The session's vLLM servers (eppkit.runtimes.vllm_servers.ServerPool, whose every other method it passes on),
    whose :meth:`backend_for` tells a missing install as a missing prerequisite (:func:`require`), for the testbeds
    and for a test that asks for the servers itself alike."""

    def __init__(self, pool) -> None:
        self.pool = pool

    def backend_for(self, topology: Topology) -> Backend:
        from eppkit.runtimes.vllm_servers import TooManyPods

        try:
            return self.pool.backend_for(topology)
        except FileNotFoundError as exc:  # not installed (2.8 GB: opt-in), or half: how to get it
            missing = str(exc)
        except TooManyPods as exc:  # by design: the session shares at most two servers
            pytest.skip(str(exc))
        require(False, missing)

    def __getattr__(self, name: str):
        return getattr(self.pool, name)


def session_topology(config: pytest.Config, topology: "Topology", servers: SessionServers | None = None) -> "Topology":
    """``topology`` with the session's options where it leaves them open: the Envoy version, an external
    EPP, the backend (a missing simulator binary or vLLM install is a missing prerequisite, :func:`require`);
    a vllm backend gets the session's servers (``servers``)."""
    from eppkit import flows
    from eppkit.backends import Backend, BackendMissing
    from eppkit.runtimes import first_use

    version = envoy_version(config)
    if version is not None and topology.envoy_version is None:
        topology = dataclasses.replace(topology, envoy_version=version)
    topology = session_epp(config, topology)
    watches_pool = first_use.watches_pool(topology)
    if topology.backend == Backend():
        backend = session_backend(config)
        try:
            backend.validate(flows.get(topology.flow), watches_pool)
        except ValueError as exc:  # by design: e.g. epd needs the mock's encoder cache
            pytest.skip(f"this session's backend ({backend.label}) cannot serve this test's topology: {exc}")
        topology = dataclasses.replace(topology, backend=backend)
    shared = topology.backend.entry.shared and not topology.backend.running and servers is not None
    if topology.backend.starts_servers and not shared:
        try:
            topology.backend.require_installed()
        except BackendMissing as exc:  # not built or installed: how to get it
            require(False, str(exc))
    if shared:
        topology = dataclasses.replace(topology, backend=servers.backend_for(topology))
    if watches_pool:
        require_control_plane()
    return topology


def selected_runtimes(config: pytest.Config) -> list[str]:
    """--eppkit-runtime (or the ini key): local, docker (or an outside package's runtime), all, or a comma list; as
    the session read it (eppkit.options.runtimes_named, once, in pytest_configure)."""
    return list(config.stash[RUNTIMES])


CONTRACT = "eppkit_runtime_contract"
ONLY_ON = "eppkit_runtimes"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test that needs a testbed (through eppkit_runtime, directly or not) runs once per runtime.
    if "eppkit_runtime" in metafunc.fixturenames:
        metafunc.parametrize("eppkit_runtime", selected_runtimes(metafunc.config), indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``eppkit_runtimes(*names)`` runs on those runtimes only: on the others it is deselected, never
    skipped. ``--eppkit-other-runtimes contract``: on every runtime but the first, only the runtime contract runs
    (the tests, or parametrized cases, marked ``eppkit_runtime_contract``); the others are deselected there."""
    contract_only = values(config).other_runtimes == "contract"
    first = selected_runtimes(config)[0]
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        runtime = callspec.params.get("eppkit_runtime") if callspec is not None else None
        only = item.get_closest_marker(ONLY_ON)
        off = only is not None and runtime not in only.args
        off = off or (contract_only and runtime not in (None, first) and item.get_closest_marker(CONTRACT) is None)
        (dropped if off else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
