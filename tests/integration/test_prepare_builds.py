"""What a session's tests need and the machine lacks is built once before the first test, outside every test's
timeout (eppkit.pytest_plugin.prepare), or the tests that need it say how to get it; the vLLM preset stays opt-in.

Each case runs a whole pytest session in a subprocess with the kit's plugin, over tests that only record when and
where they ran. Its conftest puts fake builds in the place of the real ones (eppkit.runtimes.first_use.BUILDS): each
takes 3 s, longer than the session's ``--timeout 1``, and records when it ran and in which process.

| session | expected |
|---|---|
| one process | each test's needs found from its ``eppkit_topology`` marker, the ``eppkit_control_plane`` fixture, ``eppkit_prepare`` (a build or a mode); each build done once, before the first test; every test passes; the progress on the terminal; an unknown name fails its test saying so |
| two pytest-xdist workers | each build done once, by the controller (it has the terminal), before any worker's first test; the progress on the terminal |
| a build that cannot be done, a laptop / CI=true | its tests skip with the build's words / fail; a test that needs nothing passes |
| the vLLM preset missing, a test calling ``eppkit_vllm_servers.backend_for`` itself, a laptop / CI=true | skipped saying ``eppkit bootstrap --backend vllm`` / failed as a missing prerequisite |
"""

import json
import subprocess
import textwrap

import pytest

from tests.support.inner import PYTEST, REPO_ROOT, session_env

pytestmark = pytest.mark.integration

BUILD_S = 3.0

CONFTEST = """
    import dataclasses, json, os, time
    import pytest
    from eppkit.runtimes import first_use

    LOG, DONE, RAN = {log!r}, {done!r}, {ran!r}

    def fake(build):
        def built():
            return os.path.exists(os.path.join(DONE, build.name))

        def make(progress):
            started = time.time()
            progress(f"{{build.name}}: compiling (a fake, {build_s} s)")
            if os.environ.get("FAKE_NO_GO"):
                raise RuntimeError(f"{{build.name}}: `go` is not on PATH.\\nHint: install Go, then eppkit bootstrap --all")
            time.sleep({build_s})
            open(os.path.join(DONE, build.name), "w").close()
            with open(LOG, "a") as f:
                f.write(json.dumps([build.name, os.getpid(), started, time.time()]) + "\\n")
            return f"the fake {{build.name}}"

        return dataclasses.replace(build, built=built, build=make)

    first_use.BUILDS.update({{name: fake(build) for name, build in first_use.BUILDS.items()}})

    @pytest.fixture
    def eppkit_control_plane():  # the name is what counts; none is started
        return None

    @pytest.fixture(scope="session")
    def eppkit_runtime(request):  # the runtime's name alone: no engine is asked
        return request.param

    @pytest.fixture(scope="session")
    def eppkit_jaeger():  # what the vLLM servers export to; nothing listens
        return type("Jaeger", (), {{"otlp_grpc_endpoint": "127.0.0.1:9"}})()

    @pytest.fixture(autouse=True)
    def ran(request):
        with open(RAN, "a") as f:
            f.write(json.dumps([request.node.name, os.getpid(), time.time()]) + "\\n")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(session):
        from eppkit.pytest_plugin.prepare import item_needs

        needs = {{}}
        for item in session.items:
            try:
                needs[item.name] = item_needs(item)
            except ValueError as exc:
                needs[item.name] = str(exc)
        with open(os.path.join(DONE, f"needs-{{os.getpid()}}.json"), "w") as f:
            json.dump(needs, f)
"""

TESTS = """
    import pytest

    POOL_COMMAND = "my-epp --port {grpc_port} --kubeconfig {kubeconfig} --pool-name {pool_name}"

    @pytest.mark.eppkit_topology(mode="gaie-epp")
    def test_topology_gaie():
        pass

    @pytest.mark.eppkit_topology(mode="external-epp", options={"epp_command": POOL_COMMAND})
    def test_topology_external_pool():
        pass

    @pytest.mark.eppkit_topology(mode="ext_proc")
    def test_topology_ext_proc():
        pass

    def test_fixture(eppkit_control_plane):
        pass

    @pytest.mark.eppkit_prepare("control-plane")
    def test_marker_build():
        pass

    @pytest.mark.eppkit_prepare("gaie-epp")
    def test_marker_mode():
        pass

    def test_nothing():
        pass
"""

UNKNOWN = """
    import pytest

    @pytest.mark.eppkit_prepare("no-such-thing")
    def test_unknown():
        pass
"""

RUNTIMES = """
    def test_runtime(eppkit_runtime):
        pass
"""

VLLM = """
    from eppkit.topology import Topology, VllmSpec

    def test_vllm(eppkit_vllm_servers):
        eppkit_vllm_servers.backend_for(Topology(backend="vllm", vllm=[VllmSpec("vllm-0")]))
"""


def session(tmp_path, *args: str, files: dict[str, str], **env: str) -> tuple[int, str, dict]:
    """A session over ``files`` with the fake builds (``env`` added; CI unset unless given): its exit status, its
    output, and what it recorded: builds, runs, and each collecting process's needs per test."""
    log, done, ran = tmp_path / "builds.jsonl", tmp_path / "done", tmp_path / "ran.jsonl"
    done.mkdir()
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST.format(log=str(log), done=str(done), ran=str(ran),
                                                                          build_s=BUILD_S)))
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    # An empty cache: the vLLM preset is not installed there, whatever this machine has.
    environment = session_env(tmp_path, **{"CI": "", "EPPKIT_CACHE": str(tmp_path / "cache"), **env})
    proc = subprocess.run([*PYTEST, "--rootdir", str(tmp_path), "-rs", "--timeout", "1", *args,
                           str(tmp_path)], check=False, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                          env=environment)

    def lines(path):
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    recorded = {"builds": lines(log), "ran": lines(ran),
                "needs": [json.loads(p.read_text()) for p in sorted(done.glob("needs-*.json"))]}
    return proc.returncode, proc.stdout + proc.stderr, recorded


def test_each_source_of_needs_is_found_and_built_once_before_the_first_test_outside_its_timeout(tmp_path):
    code, out, seen = session(tmp_path, files={"test_needs.py": TESTS, "test_unknown.py": UNKNOWN})
    both, plane = ["gaie-epp", "control-plane"], ["control-plane"]
    needs = seen["needs"][0]
    assert {name: needs[name] for name in needs if name != "test_unknown"} == {
        "test_topology_gaie": both, "test_topology_external_pool": plane, "test_topology_ext_proc": [],
        "test_fixture": plane, "test_marker_build": plane, "test_marker_mode": both, "test_nothing": []}, needs
    assert code == 1 and "7 passed, 1 error" in out, out  # the fakes take 3 s, each test's timeout is 1 s
    assert "@pytest.mark.eppkit_prepare('no-such-thing'): neither a first-use build" in out, out
    assert sorted(name for name, *_ in seen["builds"]) == sorted(both), seen["builds"]
    built = max(end for *_, end in seen["builds"])
    assert all(started > built for _, _, started in seen["ran"]), (seen["builds"], seen["ran"])
    assert "eppkit: building GAIE's EPP once, before the session's first test" in out, out
    assert "eppkit:   gaie-epp: compiling (a fake" in out and "eppkit: GAIE's EPP ready after" in out, out


def test_under_two_workers_the_controller_builds_each_once_with_its_progress_before_any_test(tmp_path):
    code, out, seen = session(tmp_path, "-n", "2", files={"test_needs.py": TESTS})
    assert code == 0 and "7 passed" in out, out
    assert len(seen["needs"]) == 2, "each worker collected and found its needs"
    assert sorted(name for name, *_ in seen["builds"]) == ["control-plane", "gaie-epp"], seen["builds"]
    builders = {pid for _, pid, *_ in seen["builds"]}
    workers = {pid for _, pid, _ in seen["ran"]}
    assert len(workers) == 2 and not builders & workers, (builders, workers)  # the controller, whose terminal it is
    built = max(end for *_, end in seen["builds"])
    assert all(started > built for _, _, started in seen["ran"]), (seen["builds"], seen["ran"])
    assert "eppkit: building the control plane (etcd, kube-apiserver) once" in out, out
    assert "eppkit:   control-plane: compiling (a fake" in out, out


def test_a_runtimes_images_are_made_before_its_first_test_and_not_for_the_local_runtime(tmp_path):
    code, out, seen = session(tmp_path, "--eppkit-runtime", "local,docker", files={"test_runtime.py": RUNTIMES})
    assert seen["needs"][0] == {"test_runtime[local]": [], "test_runtime[docker]": ["images"]}, seen["needs"]
    assert code == 0 and "2 passed" in out, out  # the fake takes 3 s, each test's timeout is 1 s
    assert [name for name, *_ in seen["builds"]] == ["images"], seen["builds"]
    assert all(started > seen["builds"][0][3] for _, _, started in seen["ran"]), (seen["builds"], seen["ran"])
    assert "eppkit: building the container images (Envoy, Jaeger, the kit's services) once" in out, out


@pytest.mark.parametrize("ci", ["", "true"], ids=["laptop", "ci"])
def test_a_build_that_cannot_be_done_and_the_missing_vllm_preset_skip_saying_how_or_fail_in_ci(tmp_path, ci):
    files = {"test_needs.py": TESTS, "test_vllm.py": VLLM}
    code, out, seen = session(tmp_path, files=files, FAKE_NO_GO="1", CI=ci)
    assert seen["builds"] == [] and "eppkit: GAIE's EPP not built; the tests that need it say why" in out, out
    assert sorted(name for name, *_ in seen["ran"]) == ["test_nothing", "test_topology_ext_proc", "test_vllm"]
    if not ci:
        assert code == 0 and "2 passed, 6 skipped" in out, out
        assert "gaie-epp: `go` is not on PATH." in out and "eppkit bootstrap --backend vllm" in out, out
    else:
        assert code == 1 and "1 failed, 2 passed, 5 errors" in out, out  # the builds' at setup, vLLM's in the test
        assert "prerequisite missing in CI: GAIE's EPP could not be built" in out, out
        assert "prerequisite missing in CI: the vLLM preset is not installed" in out, out
