"""An outside package adds a runtime and a backend, each one module declared as an entry point: the kit's
registries find them and a testbed runs on them, with nothing of the kit edited (docs/modes.md, "From a package of
your own"; docs/bring-your-own-backend.md, "Adding a backend").

The package is a folder on PYTHONPATH with a ``.dist-info`` (what ``pip install`` of a project with
``[project.entry-points."eppkit.runtimes"]`` writes); the check runs in a fresh interpreter, so the entry points are
read as a user's session reads them.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

RUNTIME = '''
"""A runtime of its own: processes of this host, Envoy under `nice -n 5`: one module, the whole provider
interface (eppkit.runtimes.registry.Runtime, and the launcher it hands a testbed: eppkit.runtimes.launching.Launcher),
made of the recipes every runtime shares (eppkit.runtimes.common), importing no other runtime."""
from eppkit.components.jaeger import Jaeger
from eppkit.runtimes import common
from eppkit.runtimes.registry import Capabilities, register


class NicedLauncher:
    runtime = "niced"

    def jaeger(self, run_dir, ports=None, **kwargs):
        return Jaeger(run_dir, ports=ports, **kwargs)

    def service(self, spec, env, run_dir, extra_args):
        return common.host_service(spec, env, run_dir, extra_args)

    def envoy(self, binary, config_path, run_dir, admin_port, env):
        return common.host_envoy(binary, config_path, run_dir, admin_port, env, wrapper=["nice", "-n", "5"])

    def pod_addresses(self, run_dir):
        return common.loopback_pods(run_dir)

    def pool_home(self, run_dir):
        return None  # no cluster: a pool lives in the session's control plane

    def release(self, run_dir):
        (run_dir / "released").write_text("niced")  # what the testbed's stop asked of it, for the test to see


class NicedRuntime:
    name, order = "niced", 100
    capabilities = Capabilities()

    def available(self):
        return True, "nice(1)"

    def sweep(self):
        return ""

    def prepare(self, progress):
        return {}

    def launcher(self):
        return NicedLauncher()

    def leftovers(self):
        return ""

    def workers_leftovers(self, tag):
        return ""

    def reaches_this_host(self):
        return True


register(NicedRuntime())
'''

BROKEN_RUNTIME = '''
raise RuntimeError("this runtime does not load")
'''

BACKEND = '''
"""A backend of its own: the kit's mock program with a fixed first-token time, emitting no spans it waits for."""
from eppkit.backends.registry import BackendKind, register
from eppkit.observability.expected_spans import NONE
from eppkit.plan import ServiceSpec


def server(s):
    return ServiceSpec(s.name, "eppkit.services.vllm", s.port, ["--instance", s.name, "--served-model-name", s.model,
                                                                 "--time-to-first-token", "1"], host=s.host)


KIND = register(BackendKind("quick-mock", 50, "the mock at 1 ms TTFT", NONE, lambda _: "external: quick-mock",
                            server=server))
'''


@pytest.fixture
def outside(tmp_path):
    (tmp_path / "niced_runtime.py").write_text(RUNTIME)
    (tmp_path / "quick_backend.py").write_text(BACKEND)
    info = tmp_path / "outside_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[eppkit.runtimes]\nniced = niced_runtime\n\n"
                                           "[eppkit.backends]\nquick-mock = quick_backend\n")
    return tmp_path


def test_a_runtime_and_a_backend_from_an_outside_package_run_a_testbed(outside):
    code = textwrap.dedent("""
        import os
        from eppkit import RUNTIMES, Topology, create
        from eppkit.backends import presets
        from eppkit.runtimes import ALL_RUNTIMES

        assert RUNTIMES[-1] == "niced" and "niced" in ALL_RUNTIMES and "quick-mock" in presets(), (RUNTIMES, presets())
        with create(Topology(mode="ext_proc", backend="quick-mock"), runtime="niced") as bed:
            result = bed.client().chat({"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}],
                                        "max_tokens": 2})
            assert result.status == 200, result
            assert bed.served_pod(result.headers) in {"vllm-0", "vllm-1"}, result.headers
            assert os.getpriority(os.PRIO_PROCESS, bed.envoy.process.pid) == 5
            trace = bed.wait_for_trace(result)  # what the backend says it emits: none of its own spans
        assert (bed.run_dir / "released").read_text() == "niced"  # the testbed's stop released what it held
        print("ok", bed.runtime, bed.topology.backend.label, len(trace.spans))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(outside), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=outside, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok niced external: quick-mock"), proc.stdout


def test_an_outside_runtime_that_does_not_load_is_a_plugin_error_naming_it(outside):
    (outside / "broken_runtime.py").write_text(BROKEN_RUNTIME)
    points = outside / "outside_plugins-1.0.dist-info" / "entry_points.txt"
    points.write_text(points.read_text().replace("niced = niced_runtime\n",
                                                 "niced = niced_runtime\nbroken = broken_runtime\n"))
    code = "import eppkit.runtimes"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(outside), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=outside, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "PluginError: the eppkit.runtimes entry point 'broken' of outside-plugins" in proc.stderr, proc.stderr
    assert "this runtime does not load" in proc.stderr, proc.stderr
