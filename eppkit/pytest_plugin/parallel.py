"""The plugin under pytest-xdist (``pytest -n N``): what each worker has of its own, what the run shares.

| what | under pytest-xdist |
|---|---|
| ports | leased machine-wide (:mod:`eppkit.components.ports`): no two workers, sessions or ``eppkit up`` hold one port |
| the session's tag | the controller's is handed to every worker (``workerinput``); a worker's is ``<that tag>/<worker id>``, carried by every process it starts and on every container's ``eppkit.test-session`` label |
| the leak check | each worker checks its own session and hands its findings to the controller, which reports them, looks for what any worker left (a crashed one) by the run's tag, and fails the run |
| session Jaegers | one per runtime per worker (session fixtures are per worker) |
| the cluster (``--eppkit-kubeconfig``) | one handle per worker, made from the option at its start (:mod:`eppkit.cluster.handle`): its own client, node choice and rights check |
| the live UI (``--eppkit-ui``) | one per run: the controller starts Zipkin's server and prints its URL, every worker feeds its Jaegers into it |
| run folders | ``<runs>/<time>-<worker id>-<label>`` (:func:`eppkit.runtimes.testbed.new_run_dir`) |
| shared testbeds | the tests of a module that use ``eppkit_shared_testbed_factory`` form one ``xdist_group`` per runtime (``eppkit_share_per("mode")``: per runtime and mode): under ``--dist loadgroup`` they run on one worker and share its testbeds |
| tests that must run alone | ``@pytest.mark.eppkit_alone("why")``: no other test of the run runs meanwhile; all of them one ``xdist_group``, run back to back (:mod:`eppkit.pytest_plugin.alone`) |
| ``--eppkit-keep-on-failure`` | refused: a worker has no terminal to wait on |

Every hook here that only xdist knows is ``optionalhook``: without pytest-xdist the plugin loads as before.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

from eppkit.core.settings import settings

INPUT_TAG = "eppkit_session"  # workerinput: the controller's session tag
INPUT_UI = "eppkit_ui_zipkin"  # workerinput: the URL of the run's Zipkin (--eppkit-ui)
INPUT_HOST = "eppkit_ui_host"  # workerinput: the machine it runs on
RUN_ZIPKIN = pytest.StashKey[object]()  # controller: the run's Zipkin server
WORKER_LEAKS = "eppkit_leaks"  # workeroutput: what a worker's leak check found, for the controller to report
REPORTED = pytest.StashKey[list]()  # controller: the leak lines its workers reported
WORKER_LOOK = "eppkit_leak_look"  # workeroutput: what a worker's look for its own tag saw
LOOKS = pytest.StashKey[dict]()  # controller: worker id -> what its own look saw
SHARED_FIXTURE = "eppkit_shared_testbed_factory"
ALONE = "eppkit_alone"  # the marker of a test that runs while no other does (eppkit.pytest_plugin.alone)
SHARE_PER = "eppkit_share_per"  # the marker that splits a module's shared-testbed group by parameters


def worker_id(config: pytest.Config) -> str | None:
    """``gw0``, ``gw1``, ... in a pytest-xdist worker; None elsewhere."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput is not None else None


def is_controller(config: pytest.Config) -> bool:
    """The pytest-xdist controller: it runs no test, its workers do."""
    return worker_id(config) is None and getattr(config.option, "dist", "no") != "no"


def session_tag(config: pytest.Config) -> str:
    """This session's tag: fresh, or in a worker the controller's plus the worker's id.

    Fresh even inside another session's test (a test that runs pytest): the outer session's processes
    are not this one's leaks, and what this one leaves is its own check's business.
    """
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get(INPUT_TAG):
        return f"{workerinput[INPUT_TAG]}/{workerinput['workerid']}"
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def refuse_under_xdist(config: pytest.Config, option: str, why: str) -> None:
    if worker_id(config) is not None or is_controller(config):
        raise pytest.UsageError(f"{option} {why}; it cannot under pytest-xdist. Run the test without workers: "
                                f"add -n 0 (or -p no:xdist)")


def run_folder() -> Path:
    """A folder of this run on this machine, named by the controller's tag (so the controller and its workers
    agree and two runs do not meet): the alone tests' locks, the test groups. The controller removes it."""
    run = (settings().test_session or "").split("/")[0] or str(os.getpid())
    return Path(tempfile.gettempdir()) / f"eppkit-run-{run}"


def pytest_unconfigure(config: pytest.Config) -> None:
    if is_controller(config):  # every worker is gone
        shutil.rmtree(run_folder(), ignore_errors=True)


def run_ui_url(config: pytest.Config) -> str | None:
    """In a worker of a run with --eppkit-ui: the run's Zipkin, which the controller started, when this worker
    runs on the controller's machine (it listens on 127.0.0.1 only; a --tx remote worker starts its own)."""
    workerinput = getattr(config, "workerinput", None) or {}
    url, host = workerinput.get(INPUT_UI), workerinput.get(INPUT_HOST)
    return url if url and host == socket.gethostname() else None


@pytest.hookimpl(tryfirst=True)  # before xdist starts the workers, which must know the UI's URL
def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller with --eppkit-ui: one live UI for the run (one URL to open), fed by every worker's Jaegers.

    When Java or Zipkin's jar is missing nothing starts here: each worker's ``eppkit_ui`` says what is missing.
    """
    from eppkit.pytest_plugin.options import PluginValues

    config = session.config
    if not is_controller(config) or not PluginValues(config).ui:
        return
    from eppkit.runtimes.testbed import new_run_dir
    from eppkit.ui import zipkin

    if zipkin.find_java()[0] is None or zipkin.find_jar() is None:
        return
    server = zipkin.ZipkinServer(new_run_dir("trace-ui")).start()
    config.stash[RUN_ZIPKIN] = server
    server.wait_ready()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"eppkit: every worker's traces, live: {server.ui_url}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    server = session.config.stash.get(RUN_ZIPKIN, None)
    if server is not None:
        server.stop()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller, before a worker starts: hand it the run's tag (and the run's UI)."""
    node.workerinput[INPUT_TAG] = settings().test_session
    server = node.config.stash.get(RUN_ZIPKIN, None)
    if server is not None:
        node.workerinput[INPUT_UI] = server.url
        node.workerinput[INPUT_HOST] = socket.gethostname()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """Controller, a worker is done: keep what its leak check found (a crashed worker has no output)."""
    output = getattr(node, "workeroutput", None) or {}
    node.config.stash.setdefault(REPORTED, []).extend(output.get(WORKER_LEAKS, []))
    if output.get(WORKER_LOOK):
        node.config.stash.setdefault(LOOKS, {})[node.workerinput["workerid"]] = output[WORKER_LOOK]


def group(item: pytest.Item) -> str | None:
    """The ``xdist_group`` the plugin gives a test that names none: every alone test one group (they run
    back to back on one worker); the tests of a module that use shared testbeds one group per runtime, or
    with ``@pytest.mark.eppkit_share_per("mode", ...)`` one per runtime and value of those parameters (the
    testbeds of different modes share nothing, so each mode's tests can go to another worker)."""
    if item.get_closest_marker(ALONE) is not None:
        return ALONE
    if SHARED_FIXTURE not in getattr(item, "fixturenames", ()):
        return None
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    marker = item.get_closest_marker(SHARE_PER)
    names = marker.args if marker is not None else ()  # a test lacking one of them is grouped by the others
    key = "".join(f"-{params[name]}" for name in ("eppkit_runtime", *names) if name in params)
    return f"eppkit-shared:{item.nodeid.split('::')[0]}[{key.lstrip('-')}]"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns xdist_group marks into node id suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):  # without it the mark is not even registered
        return
    for item in items:
        name = None if item.get_closest_marker("xdist_group") else group(item)
        if name is not None:
            item.add_marker(pytest.mark.xdist_group(name))


# -- --dist loadgroup on every pytest ------------------------------------------------------------------
# pytest-xdist's loadgroup tells the controller a test's group by appending "@<group>" to its node id in
# the worker; since pytest 9.2 node ids are computed and that append is lost, so groups silently stop
# grouping (pytest-xdist#1386). Until xdist carries groups another way, the plugin schedules loadgroup
# itself with xdist's own LoadGroupScheduling, told the groups through this run's folder: each worker
# writes {node id: group} there before it reports its collection, and the scheduler reads it when every
# worker has (remote --tx workers write on their own machine: there it falls back to xdist's reading).

def _groups_file(worker: str) -> Path:
    return run_folder() / f"groups-{worker}.json"


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reports its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    worker = worker_id(session.config)
    if worker is None or not getattr(session.config.option, "loadgroup", False):  # xdist's worker-side flag
        return
    groups = {}
    for item in session.items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names:
            groups[item.nodeid] = "_".join(names)
    path = _groups_file(worker)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(groups))
    staged.replace(path)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupScheduling(LoadGroupScheduling):
        """xdist's loadgroup with each test's group read from the workers' files (see above)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = {}
                for path in sorted(run_folder().glob("groups-*.json")):
                    self._groups.update(json.loads(path.read_text()))
            return self._groups.get(nodeid) or super()._split_scope(nodeid)

        # pytest-xdist 3.8's loadscope/loadgroup can hang for good once a crashed worker is replaced: the dead
        # worker's finished groups go back on the queue as work with nothing to run (pytest-xdist#1323, #1378),
        # and a worker can be left holding a single test, which it only starts once it knows the next one or
        # that none comes (#1327); and the test a worker died on is run again by each replacement until the
        # restarts are spent (#1371). Fixed, or proposed, on xdist's main branch, not released: done here too.
        def remove_node(self, node) -> str | None:
            workload = self.assigned_work.pop(node)
            crashed = next((nodeid for unit in workload.values() for nodeid, done in unit.items() if not done), None)
            if crashed is None:
                return None
            for unit in workload.values():
                if crashed in unit:
                    unit[crashed] = True  # xdist reports it as failed: not run again
            self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

        def _assign_work_unit(self, node) -> None:
            while self.workqueue and all(next(iter(self.workqueue.values())).values()):
                self.workqueue.popitem(last=False)  # every test of it ran already
            if self.workqueue:
                super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            super()._reschedule(node)
            while not node.shutting_down and self._pending_of(self.assigned_work.get(node, {})) < 2:
                if not self.workqueue:
                    node.shutdown()
                    break
                self._assign_work_unit(node)

    return GroupScheduling(config, log)
