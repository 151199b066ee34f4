"""First-use builds before the session's first test: what the collected tests' testbeds run and the machine lacks
(GAIE's EPP, the Kubernetes control plane: :mod:`eppkit.runtimes.first_use`, minutes each when cold) is built once,
with its progress on the terminal, outside every test's timeout, not inside the first test that needs it.

What a test needs is read from what was collected: its ``eppkit_topology`` marker (what that testbed runs, with the
session's ``--eppkit-epp-*``), the ``eppkit_control_plane`` fixture, and ``@pytest.mark.eppkit_prepare(*names)``
for a test that makes its topologies in code (names: first-use builds, or modes: what a testbed of the mode runs).

| session | who builds | when | its progress |
|---|---|---|---|
| one process | that process | after collection, before the first test (``pytest_runtestloop``) | on the terminal |
| pytest-xdist | the controller, told each worker's needs through the run's folder | when a worker has collected: xdist schedules no test before the hook returns | on the terminal (a worker has none) |
| a ``--tx`` worker on another machine | that worker | before its first test | not shown |

A build that cannot be done (no Go) or that failed is not tried again inside a test: each test that needs it is a
missing prerequisite in the build's own words (:func:`~eppkit.pytest_plugin.state.require`: a skip on a laptop,
a failure in CI). The vLLM preset (2.8 GB) is never built here: it stays ``eppkit bootstrap --backend vllm``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pytest

from eppkit.core import progress
from eppkit.pytest_plugin.parallel import is_controller, run_folder, worker_id
from eppkit.pytest_plugin.session import session_epp
from eppkit.pytest_plugin.state import require

PREPARE = "eppkit_prepare"
CONTROL_PLANE_FIXTURE = "eppkit_control_plane"
INPUT_HOST = "eppkit_prepare_host"  # workerinput: the controller's machine; its workers leave the builds to it
NEEDS = pytest.StashKey[list]()  # item -> the first-use builds its testbeds run
FAILED = pytest.StashKey[dict]()  # config -> build name -> why it is not there
SEEN = pytest.StashKey[set]()  # controller: the builds it has seen to


def item_needs(item: pytest.Item) -> list[str]:
    """The first-use builds ``item``'s testbeds run, in the order they are built; ValueError for a name of
    ``eppkit_prepare`` that is neither a build nor a mode."""
    if NEEDS in item.stash:
        return item.stash[NEEDS]
    topology = item.get_closest_marker("eppkit_topology")
    named = [name for marker in item.iter_markers(PREPARE) for name in marker.args]
    fixture = CONTROL_PLANE_FIXTURE in getattr(item, "fixturenames", ())
    callspec = getattr(item, "callspec", None)
    runtime = callspec.params.get("eppkit_runtime") if callspec is not None else None  # tests run per runtime
    needs: list[str] = []
    if topology is not None or named or fixture or runtime:  # else nothing to import: a session without any of it
        from eppkit.runtimes import first_use  # pays nothing

        found = set(_topology_needs(item.config, topology.kwargs)) if topology is not None else set()
        found.update(first_use.runtime_needs(runtime) if runtime else ())
        if fixture:
            found.add(first_use.CONTROL_PLANE)
        for name in named:
            found.update(_named(name))
        needs = [name for name in first_use.BUILDS if name in found]
    item.stash[NEEDS] = needs
    return needs


def _topology_needs(config: pytest.Config, fields: dict) -> list[str]:
    from eppkit.runtimes import first_use
    from eppkit.topology import Topology

    try:
        return first_use.needs(session_epp(config, Topology(**fields)))
    except (TypeError, ValueError):  # a bad topology: its testbed says so
        return []


def _named(name: str) -> list[str]:
    from eppkit import modes
    from eppkit.runtimes import first_use
    from eppkit.topology import Topology

    if name in modes.names():  # gaie-epp is both: the mode's needs hold the build
        return first_use.needs(Topology(mode=name))
    if name in first_use.BUILDS:
        return [name]
    raise ValueError(f"@pytest.mark.{PREPARE}({name!r}): neither a first-use build ({', '.join(first_use.BUILDS)}) "
                     f"nor a mode ({', '.join(modes.names())})")


def session_needs(items: list[pytest.Item]) -> list[str]:
    """What the items' testbeds run, each once, in build order (a bad marker: that test fails at its setup)."""
    found: list[str] = []
    for item in items:
        try:
            found += [name for name in item_needs(item) if name not in found]
        except ValueError:
            continue
    if not found:
        return []
    from eppkit.runtimes import first_use

    return [name for name in first_use.BUILDS if name in found]


def prepare(config: pytest.Config, names: list[str], say: Callable[[str], object]) -> None:
    """Build what ``names`` lack, once (each build takes its cache's lock: another session or process building it
    is waited for); what could not be built goes into ``config.stash[FAILED]`` with why."""
    failed = config.stash.setdefault(FAILED, {})
    if not names:
        return
    from eppkit.runtimes import first_use

    for name in names:
        build = first_use.BUILDS[name]
        if build.built():
            continue
        say(f"eppkit: building {build.label} once, before the session's first test (first use, {build.cold}; "
            "`eppkit bootstrap --all` builds it ahead) ...")
        started = time.monotonic()
        try:
            what = build.build(lambda message: say(f"eppkit:   {message}"))
        except Exception as exc:  # noqa: BLE001  (whatever it was, the tests that need it say so; the session goes on)
            failed[name] = f"{build.label} could not be built before the session's tests: {exc}"
            say(f"eppkit: {build.label} not built; the tests that need it say why: {str(exc).splitlines()[0]}")
            continue
        say(f"eppkit: {build.label} ready after {time.monotonic() - started:.0f} s: {what}")


def _terminal(config: pytest.Config, first: str = "") -> Callable[[str], None]:
    """Lines on the terminal at once (never into a capture); ``first`` written before the first one."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or worker_id(config) is not None:  # a worker's output is nobody's
        return progress.say
    capture = config.pluginmanager.get_plugin("capturemanager")
    pending = [first]

    def write(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
            reporter.write_line(pending.pop() + line if pending else line)
            reporter.flush()

    return write


def _controller_prepares(config: pytest.Config) -> bool:
    """A pytest-xdist worker on its controller's machine: the controller builds, where its terminal is."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is not None and workerinput.get(INPUT_HOST) == socket.gethostname()


def _needs_file(worker: str) -> Path:
    return run_folder() / f"prepare-{worker}.json"


def _failed_file() -> Path:
    return run_folder() / "prepare-failed.json"


def _write(path: Path, data) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(data))
    staged.replace(path)


@pytest.hookimpl(tryfirst=True)  # in a worker: before xdist reports its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    if _controller_prepares(session.config):
        _write(_needs_file(worker_id(session.config)), session_needs(session.items))


@pytest.hookimpl(tryfirst=True)  # before the first test, outside every test's timeout
def pytest_runtestloop(session: pytest.Session) -> None:
    config = session.config
    if is_controller(config) or _controller_prepares(config) or config.option.collectonly:
        return
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return  # the session stops at its collection errors
    prepare(config, session_needs(session.items), _terminal(config))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller, before a worker starts: its machine, so that a worker on it leaves the builds to the controller."""
    node.workerinput[INPUT_HOST] = socket.gethostname()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """Controller, a worker has collected: build what its tests need (no test is scheduled until this returns)."""
    config = node.config
    if config.option.collectonly:
        return
    try:
        needs = json.loads(_needs_file(node.workerinput["workerid"]).read_text())
    except (OSError, ValueError):  # a worker on another machine builds for itself
        return
    seen = config.stash.setdefault(SEEN, set())
    todo = [name for name in needs if name not in seen]
    seen.update(todo)
    if todo:
        prepare(config, todo, _terminal(config, first="\n"))  # below xdist's status line
        _write(_failed_file(), config.stash[FAILED])


def _failures(config: pytest.Config) -> dict[str, str]:
    if FAILED not in config.stash and _controller_prepares(config):
        try:
            config.stash[FAILED] = json.loads(_failed_file().read_text())
        except (OSError, ValueError):  # the controller found every build there or made it
            config.stash[FAILED] = {}
    return config.stash.get(FAILED, {})


def pytest_runtest_setup(item: pytest.Item) -> None:
    try:
        needs = item_needs(item)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    failed = _failures(item.config)
    for name in needs:
        require(name not in failed, failed.get(name, ""))
