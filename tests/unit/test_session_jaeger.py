"""A session's Jaeger (runtimes.create_jaeger) gives back what its runtime held for it, as a testbed does; eppkit
doctor asks each runtime provider whether it can run here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eppkit import runtimes
from eppkit.cli import doctor
from eppkit.components.jaeger import Jaeger
from eppkit.components.readiness import ReadinessTimeout

pytestmark = pytest.mark.unit


class FakeProcess:
    def __init__(self, ready: bool):
        self.ready, self.stopped = ready, 0

    def start(self):
        return self

    def wait_ready(self, strategy, hint=""):
        if not self.ready:
            raise ReadinessTimeout("jaeger did not get ready (a fake that never does)")

    def stop(self, grace_s: float = 5.0):
        self.stopped += 1


class FakeLauncher:
    """A runtime's launcher that holds something per run folder (a namespace) until released."""

    runtime = "fake"

    def __init__(self, ready: bool = True):
        self.ready, self.held, self.processes = ready, set(), []

    def make(self, name, args, log_path, *, env=None, mounts=()):
        self.processes.append(FakeProcess(self.ready))
        return self.processes[-1]

    def jaeger(self, run_dir, ports=None):
        self.held.add(run_dir)
        return Jaeger(run_dir, self)

    def release(self, run_dir):
        self.held.discard(run_dir)


@pytest.fixture
def fake_runtime(monkeypatch):
    made: list[FakeLauncher] = []

    def launcher(runtime, cluster=None, **options):
        made.append(FakeLauncher(**options))
        return made[-1]

    monkeypatch.setattr(runtimes, "launcher", launcher)
    return made


def test_a_session_jaeger_releases_what_its_runtime_held_when_it_stops(fake_runtime, tmp_path):
    with runtimes.create_jaeger("fake", tmp_path / "jaeger") as jaeger:
        assert fake_runtime[0].held == {tmp_path / "jaeger"}
        assert jaeger.process is fake_runtime[0].processes[0]
    assert fake_runtime[0].held == set()
    assert fake_runtime[0].processes[0].stopped == 1


def test_a_session_jaeger_that_never_gets_ready_stops_and_releases_too(fake_runtime, tmp_path):
    with pytest.raises(ReadinessTimeout, match="never does"), \
            runtimes.create_jaeger("fake", tmp_path / "jaeger", launcher_options={"ready": False}):
        pytest.fail("a Jaeger that never got ready was handed out")
    assert fake_runtime[0].held == set()
    assert fake_runtime[0].processes[0].stopped == 1


def test_doctor_asks_every_runtime_provider_in_its_own_words(monkeypatch):
    providers = [SimpleNamespace(name="here", available=lambda: (True, "this host")),
                 SimpleNamespace(name="faraway", available=lambda: (False, "start the faraway engine"))]
    monkeypatch.setattr(runtimes, "all_runtimes", lambda: providers)
    rows = {check.name: check for check in doctor._runtimes()}
    assert rows["runtime here"].ok and rows["runtime here"].version == "this host"
    assert not rows["runtime faraway"].ok and not rows["runtime faraway"].required
    assert rows["runtime faraway"].how_to_get == "for --runtime faraway: start the faraway engine"
