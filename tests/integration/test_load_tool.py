"""The load tool as installed in the cache (`eppkit bootstrap --load-tool inference-perf`): its tokenizer counts as
the mock does, it is found by the interpreter it needs, and a run that outlives its bound is stopped with its
workers. Without the install these skip on a laptop and fail in CI (.ci/run installs it)."""

import json
import random
import socket
import string
import subprocess
import threading

import pytest
from eppkit.services.openai_server import tokens

from eppkit.builds import inference_perf as ip
from eppkit.compare import loadtool
from eppkit.compare.loadmetrics import Slo
from eppkit.core import procfs
from eppkit.pytest_plugin.state import require
from eppkit.workload import SCENARIOS, plan_requests

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tool():
    found = ip.find()
    require(found is not None, ip.missing() if found is None else "")
    return found


def _texts() -> list[str]:
    rng = random.Random(28)
    alphabet = string.ascii_letters + string.digits + string.punctuation + " \t\n" + "éüß東京—…"
    return ([" ".join(w for w in "".join(tokens.output_tokens(seed, f"p{seed}", n)).split()) for seed, n in
             ((s, rng.randint(1, 300)) for s in range(100))]
            + [p.body["messages"][0]["content"] for p in plan_requests(SCENARIOS["long-prompt"], 5)]
            + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(200)]
            + ["wait... what?!", "don't stop", "Hello,world", "naïve café — 東京 2024-11-24", "a\u00a0b", "x_y z-1"])


def test_the_tokenizer_counts_every_text_as_the_mock_does(tool):
    texts = _texts()
    counted = json.loads(ip._run_tokenizer(tool, ["count", str(tool.tokenizer)], texts))
    wrong = [(t[:60], n, tokens.count_tokens(t)) for t, n in zip(texts, counted) if n != tokens.count_tokens(t)]
    assert len(counted) == len(texts) and wrong == [], wrong[:5]


def test_a_python_given_by_the_environment_is_the_only_one_tried(tmp_path, monkeypatch):
    monkeypatch.setenv(ip.PYTHON_ENV, str(tmp_path / "no-such-python"))
    python, said = ip.find_python()
    assert python is None
    assert said.startswith(f"${ip.PYTHON_ENV}={tmp_path / 'no-such-python'} is not a Python >= 3.12")
    assert ip.missing() == said


def test_a_run_that_outlives_its_bound_is_stopped_with_its_workers(tool, tmp_path, monkeypatch):
    started = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            started.append(self.pid)

    monkeypatch.setattr(loadtool.subprocess, "Popen", Recorded)
    # A server that accepts and never answers: without the bound, the tool would wait its request timeout.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held = []
    stop = threading.Event()

    def hold():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    threading.Thread(target=hold, daemon=True).start()
    data = tmp_path / "requests.json"
    data.write_text(json.dumps(loadtool.sharegpt(plan_requests(SCENARIOS["stream"], 4))))
    cfg = loadtool.config(tool, url=f"http://127.0.0.1:{silent.getsockname()[1]}", model="mock-llm", data=data,
                          out=tmp_path / "reports", requests=4, concurrency=2, rate=0.0, stream=True,
                          request_timeout_s=120.0, seed=0, slo=Slo())
    try:
        with pytest.raises(loadtool.LoadToolError, match="timed out after 20 s"):
            loadtool.run_tool(tool, cfg, tmp_path, timeout_s=20)
    finally:
        stop.set()
        for conn in held:
            conn.close()
        silent.close()
    (leader,) = started
    assert _in_group(leader) == [], "the tool's processes outlived its bound"


def _in_group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (the tool runs in a session of its own: its workers too)."""
    return procfs.group_members(pgid)