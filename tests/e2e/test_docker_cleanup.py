"""The docker runtime leaves no container behind: after a failing test, after a failed start, after SIGKILL
(after Ctrl-C: tests/e2e/test_cli.py, on each runtime).

Every container the kit starts is labelled with its owner process (``eppkit.owner-pid``)
and its testbed (``eppkit.testbed``), which is how these tests find what must be gone.
"""

import subprocess
import textwrap

import pytest

from eppkit.core.polling import poll
from tests.support.cli import REPO_ROOT, start_up
from tests.support.inner import PYTEST, session_env

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def docker(request):
    """The engine, when the docker runtime is selected (--eppkit-runtime docker or all)."""
    from eppkit.components import container as containers
    from eppkit.pytest_plugin.session import selected_runtimes
    from eppkit.pytest_plugin.state import require
    from eppkit import runtimes

    if "docker" not in selected_runtimes(request.config):
        pytest.skip("the docker runtime is not selected (--eppkit-runtime)")
    ok, detail = runtimes.get("docker").available()
    require(ok, detail)
    client = containers.docker_client()
    yield client
    client.close()


def _containers(client, **labels) -> list[str]:
    from eppkit.components import container as containers

    found = containers.find({"label": [f"{k}={v}" for k, v in labels.items()]}, client)
    return sorted(c.name for c in found)


def _owned_by(client, pid: int) -> list[str]:
    return _containers(client, **{"eppkit.owner-pid": pid})


def _start_up(tmp_path) -> tuple[subprocess.Popen, str, list[str]]:
    """`eppkit up --runtime docker` in the background, until it says Ctrl-C to stop."""
    # a cold engine builds its images first
    proc, envoy_url, lines = start_up(["--runtime", "docker", "--mode", "direct", "--time-to-first-token", "20"],
                                      tmp_path, timeout_s=300)
    if not envoy_url:
        proc.kill()
        pytest.fail("eppkit up did not come up:\n" + "".join(lines[-60:]))
    return proc, envoy_url, lines


def test_containers_of_a_killed_owner_are_reaped(docker, tmp_path):
    # SIGKILL runs no finally and no atexit: the watchdog that outlives its owner removes them.
    proc, envoy_url, _ = _start_up(tmp_path)
    try:
        assert _owned_by(docker, proc.pid), "nothing was started"
        proc.kill()
        proc.wait(timeout=10)
        poll(lambda: _owned_by(docker, proc.pid), until=lambda owned: owned == [], timeout_s=30, interval_s=0.5,
             describe="containers of a SIGKILLed owner removed")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_failing_test_leaves_no_container(docker, tmp_path):
    # A whole pytest session whose only test starts a docker testbed and then fails.
    (tmp_path / "test_fails.py").write_text(textwrap.dedent("""
        def test_fails_with_a_running_testbed(eppkit_testbed_factory):
            bed = eppkit_testbed_factory()
            assert bed.processes(), "started"
            assert False, "deliberately failing"
    """))
    proc = subprocess.Popen(
        [*PYTEST, "--rootdir", str(tmp_path), "--eppkit-runtime", "docker", str(tmp_path / "test_fails.py")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
        env=session_env(tmp_path, CI="true"),
    )
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "deliberately failing" in out, out[-4000:]
    assert "=== vllm-0" in out and "eppkit testbed logs" in out, "a failing test prints every component's log"
    assert "LEAK" not in out, out[-2000:]
    assert _owned_by(docker, proc.pid) == [], "containers left after a failing session"


def test_a_testbed_that_fails_to_start_removes_what_it_started(docker, tmp_path):
    from eppkit.runtimes import create
    from eppkit.topology import Topology

    bed = create(Topology(mode="ext_proc", options={"epp_args": ["--no-such-flag"]}), runtime="docker",
                 run_dir=tmp_path / "bed")
    with pytest.raises(Exception, match="epp exited with code 2"):
        bed.start()
    assert _containers(docker, **{"eppkit.testbed": "bed"}) == []
    assert "--no-such-flag" in (tmp_path / "bed" / "epp.log").read_text(), "the failing component's log is kept"


def test_a_containers_whole_output_reaches_its_log(docker, tmp_path):
    """The kit copies a container's output as it comes: a container that exits while followed ends the copy
    with every line in the log."""
    from eppkit.components.container import ManagedContainer
    from eppkit.runtimes import images

    lines = 3000
    script = f"import time\nfor i in range({lines}): print('line', i, flush=True)\ntime.sleep(1)\n"
    log = tmp_path / "c.log"
    c = ManagedContainer("talker", images.ensure(print).services, ["python", "-c", script], log).start()
    try:
        poll(lambda: c.returncode() is not None, timeout_s=30, interval_s=0.1, describe="the container's exit")
        c._follower.join(timeout=10)
        assert not c._follower.is_alive(), "the output copier did not end with the container"
        assert log.read_text().splitlines() == [f"line {i}" for i in range(lines)]
    finally:
        c.stop()


def test_the_output_of_a_container_that_exited_before_the_copy_began_is_copied(docker, tmp_path):
    """A container that has exited before the copier starts still has its output copied, and the copier ends
    (a component that dies at once must show why in its log; an attached stream would wait forever here)."""
    import threading

    from eppkit.components.container import ManagedContainer
    from eppkit.runtimes import images

    c = docker.containers.run(images.ensure(print).services, ["python", "-c", "print('died at once: bad flag')"],
                              detach=True, network_mode="host", labels={"eppkit.test": "exited-before-attach"})
    try:
        poll(lambda: c.reload() or c.status == "exited", timeout_s=30, interval_s=0.1, describe="the exit")
        with open(tmp_path / "c.log", "ab", buffering=0) as log:
            copier = threading.Thread(target=ManagedContainer._copy_output, args=(c, log), daemon=True)
            copier.start()
            copier.join(timeout=10)
        assert not copier.is_alive(), "the output copier waits on an exited container"
        assert (tmp_path / "c.log").read_text() == "died at once: bad flag\n"
    finally:
        c.remove(force=True)


def test_the_sweep_of_dead_owners_spares_an_image_build_step(docker):
    # A build step of the services image runs in a container that inherits the image's eppkit=1 label but has no
    # owner: sweeping it killed a concurrent image build (exit 137) when another worker started its session.
    from eppkit.components import container as containers
    from eppkit.runtimes import images

    image = images.ensure(print).services
    step = docker.containers.run(image, ["python", "-c", "import time; time.sleep(60)"], detach=True,
                                 labels={"eppkit": "1"}, network_mode="host")
    try:
        swept = containers.sweep()
        step.reload()
        assert step.name not in swept and step.status == "running", (swept, step.status)
    finally:
        step.remove(force=True)
