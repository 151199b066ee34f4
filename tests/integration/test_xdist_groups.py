"""Under pytest-xdist with --dist loadgroup the plugin's groups hold: a module's shared-testbed tests run on
one worker (one per value of ``eppkit_share_per``'s parameters), ``eppkit_alone`` tests run on one worker
while no other test runs, and the rest spread over the workers.

A whole session on three workers over tests that only record when and where they ran. They ask for a
fixture named ``eppkit_shared_testbed_factory`` (the inner module's own, starting nothing): the plugin
groups by that name. On pytest 9.2 this fails if the groups are left to xdist alone (pytest-xdist#1386).

A worker that dies mid-run is replaced and the run ends, whichever of its tests it died on, that test
reported once: pytest-xdist 3.8's own loadgroup hangs for good there (pytest-xdist#1323, #1327), or runs the
test again on every replacement (#1371).
"""

import json
import textwrap

import pytest

from tests.support.inner import run_pytest

pytestmark = pytest.mark.integration

INNER = """
    import json, os, time
    import pytest

    LOG = {log!r}

    @pytest.fixture
    def eppkit_shared_testbed_factory():
        return None

    def record(name):
        started = time.time()
        time.sleep(0.4)
        with open(LOG, "a") as f:
            f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], started, time.time()]) + "\\n")

    @pytest.mark.parametrize("i", range(4))
    def test_shares(eppkit_shared_testbed_factory, i):
        record("shared")

    @pytest.mark.eppkit_share_per("mode")
    @pytest.mark.parametrize("mode", ["a", "b"])
    @pytest.mark.parametrize("i", range(3))
    def test_shares_per_mode(eppkit_shared_testbed_factory, mode, i):
        record(f"mode-{{mode}}")

    @pytest.mark.eppkit_alone("times itself")
    @pytest.mark.parametrize("i", range(3))
    def test_alone(i):
        record("alone")

    @pytest.mark.parametrize("i", range(9))
    def test_anywhere(i):
        record("anywhere")
"""


def test_groups_keep_shared_tests_together_and_alone_tests_alone(tmp_path):
    log = tmp_path / "ran.jsonl"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER.format(log=str(log))))
    code, out = run_pytest(tmp_path, "-n", "3", "--dist", "loadgroup", str(tmp_path / "test_inner.py"))
    assert code == 0, out
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    workers = {name: {w for n, w, _, _ in ran if n == name} for name, _, _, _ in ran}
    assert len(ran) == 4 + 6 + 3 + 9
    assert len(workers["shared"]) == 1, workers
    assert len(workers["mode-a"]) == 1 and len(workers["mode-b"]) == 1, workers
    assert len(workers["alone"]) == 1, workers
    assert len(workers["anywhere"]) > 1, "the ungrouped tests spread over the workers"
    alone = [(t0, t1) for n, _, t0, t1 in ran if n == "alone"]
    beside = [(name, w) for name, w, t0, t1 in ran if name != "alone" and any(t0 < b and a < t1 for a, b in alone)]
    assert not beside, f"tests ran beside an alone test: {beside}"


CRASHES = {
    "second": "def test_1():\n    pass\n\ndef test_2():\n    import os\n    os._exit(3)\n",
    "first": "def test_1():\n    import os\n    os._exit(3)\n\ndef test_2():\n    pass\n",
}


@pytest.mark.parametrize("crash", list(CRASHES))
def test_a_worker_that_dies_is_replaced_and_the_run_ends(tmp_path, crash):
    (tmp_path / "test_inner.py").write_text(CRASHES[crash])
    code, out = run_pytest(tmp_path, "-n", "1", "--dist", "loadgroup", str(tmp_path / "test_inner.py"), timeout_s=180)
    crashed = {"second": "test_2", "first": "test_1"}[crash]
    assert code == 1, out
    assert f"crashed while running 'test_inner.py::{crashed}'" in out, out
    assert "1 failed, 1 passed" in out, "the test it died on is reported once, not run again, and the other runs"
