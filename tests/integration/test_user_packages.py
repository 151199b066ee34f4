"""eppkit installs one import name: a user project with its own `services`, `testbed` and
`observability` packages imports both its own and the kit's, and the kit's services still run.

The project is a folder of its own on sys.path (as a user's checkout is); each check runs in a
fresh interpreter so nothing imported by this test session can hide a clash.
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

USER_PACKAGES = ("services", "testbed", "observability")


@pytest.fixture
def user_project(tmp_path):
    for name in USER_PACKAGES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'user-{name}'\n")
    return tmp_path


def run(project, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=project, capture_output=True,
                          text=True, timeout=60)


def test_a_project_with_packages_named_like_the_kits_folders_imports_both(user_project):
    proc = run(user_project, """
        import services, testbed, observability
        assert (services.OWNER, testbed.OWNER, observability.OWNER) == ("user-services", "user-testbed", "user-observability")
        import eppkit, eppkit.services.vllm.server, eppkit.observability.trace_model, eppkit.runtimes.testbed
        from eppkit import Topology
        from eppkit import TraceCheck
        assert eppkit.services.__name__ == "eppkit.services" and not hasattr(eppkit.services, "OWNER")
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_the_kits_services_run_from_a_project_that_has_its_own_services_package(user_project):
    proc = subprocess.run([sys.executable, "-m", "eppkit.services.vllm", "--help"], cwd=user_project,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--time-to-first-token" in proc.stdout, proc.stderr


def test_the_distribution_declares_one_top_level_name(tmp_path):
    # From a folder of its own, so a checkout's egg-info in the current directory cannot answer.
    proc = run(tmp_path, """
        from importlib import metadata
        dist = metadata.distribution("eppkit")
        tops = {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}  # "..": bin/eppkit; __pycache__: the editable finder's
        extra = {t for t in tops if t not in ("eppkit", "__pycache__") and not t.endswith((".dist-info", ".pth")) and "editable" not in t}
        print(dist.read_text("top_level.txt").split(), sorted(extra))
    """)
    assert proc.stdout.strip() == "['eppkit'] []", proc.stdout + proc.stderr
