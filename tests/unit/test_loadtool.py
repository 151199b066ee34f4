"""The load-tool cross-check without running the tool: what inference-perf is given (the kit's own requests, its
load, the objective, offline), how its figures are set beside the kit's (recorded from a real run), and how the
cache says whether it is installed."""

import copy
import json
from pathlib import Path

import pytest
from eppkit.services.openai_server import tokens

from eppkit.builds import inference_perf as ip
from eppkit.compare import loadtool
from eppkit.compare.loadmetrics import Slo
from eppkit.workload import SCENARIOS, plan_requests

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "loadtool"
KIT = json.loads((DATA / "kit-stream-direct.json").read_text())  # the kit's result for 30 requests, mode direct
TOOL = json.loads((DATA / "inference-perf-summary-stream-direct.json").read_text())  # inference-perf's, same requests


def test_the_tool_gets_the_kits_prompts_and_output_lengths():
    planned = plan_requests(SCENARIOS["stream"], 20, seed=3)
    records = loadtool.sharegpt(planned)
    assert [r["conversations"][0]["value"] for r in records] == [p.body["messages"][0]["content"] for p in planned]
    # the tool counts the answer with a tokenizer that counts as the mock does: that count is its max_tokens
    assert [tokens.count_tokens(r["conversations"][1]["value"]) for r in records] == [p.body["max_tokens"] for p in planned]
    assert loadtool.unsupported(planned) is None


def test_requests_with_images_are_not_sent_by_the_tool():
    assert "images" in loadtool.unsupported(plan_requests(SCENARIOS["multimodal"], 3))


def test_config_is_the_kits_load_offline_with_the_objective_in_seconds(tmp_path):
    tool = ip.LoadTool(tmp_path, "3.12")
    common = dict(url="http://127.0.0.1:1", model="mock-llm", data=tmp_path / "d.json", out=tmp_path / "out",
                  requests=60, concurrency=4, stream=True, request_timeout_s=30.0, seed=0)
    closed = loadtool.config(tool, rate=0.0, slo=Slo.parse("ttft=200ms,tpot=20ms,e2e=1s"), **common)
    assert closed["load"]["type"] == "concurrent"
    assert closed["load"]["stages"] == [{"num_requests": 60, "concurrency_level": 4}]
    assert closed["report"]["goodput"]["constraints"] == {"ttft": 0.2, "tpot": 0.02, "request_latency": 1.0}
    assert closed["tokenizer"]["pretrained_model_name_or_path"] == str(tmp_path / "tokenizer")
    assert closed["server"]["model_name"] == "mock-llm", "unset, the tool would ask /v1/models through Envoy"
    assert closed["load"]["stage_teardown_grace_seconds"] == loadtool.TEARDOWN_GRACE_S
    opened = loadtool.config(tool, rate=10.0, slo=Slo(), **common)
    assert opened["load"]["type"] == "constant" and opened["load"]["stages"] == [{"rate": 10.0, "duration": 6}]
    assert "goodput" not in opened["report"]
    assert tool.env(tmp_path)["HF_HUB_OFFLINE"] == "1"


def test_a_real_run_agrees_within_every_tolerance():
    checked = loadtool.agreement(KIT, TOOL, configured_itl_ms=10.0)
    assert checked["differences"] == []
    figures = checked["figures"]
    assert all(f["agree"] for f in figures.values()), figures
    assert figures["requests ok"]["kit"] == figures["requests ok"]["tool"] == 30
    assert figures["output tokens"]["kit"] == figures["output tokens"]["tool"] == 750
    assert checked["configured_itl"]["tool"]["agree"] and checked["configured_itl"]["kit"]["agree"]


def test_a_disagreement_is_said_with_both_numbers_and_the_tolerance():
    slower = copy.deepcopy(TOOL)
    slower["successes"]["latency"]["time_to_first_token"]["median"] += 0.020  # 20 ms later
    slower["successes"]["token_count_mismatches"] = 2
    checked = loadtool.agreement(KIT, slower, configured_itl_ms=5.0)
    assert not checked["figures"]["TTFT p50"]["agree"]
    said = "\n".join(checked["differences"])
    assert "TTFT p50: kit 104.7, inference-perf 122.7 ms (apart by 17.9, tolerance max(5 ms, 5%))" in said
    assert "ITL mean of the kit: 10.06 ms, configured 5 ms" in said and "ITL mean of inference-perf" in said
    assert "counted other output tokens than the server reported in 2 request(s)" in said


def test_the_table_shows_both_tools_and_a_skipped_mode_says_why():
    block = {"modes": {
        "direct": {**KIT, "load_tool": {"tool": ip.NAME, "version": ip.VERSION, "status": "ok",
                                        "traced": {"ok": 30, "envoy_rooted_traces": 30},
                                        **loadtool.agreement(KIT, TOOL, configured_itl_ms=10.0)}},
        "ext_proc": {**KIT, "load_tool": {"tool": ip.NAME, "version": ip.VERSION, "status": "skipped",
                                          "reason": "needs Python >= 3.12\nmore"}}}}
    table = loadtool.table(block)
    direct, ext_proc = table.rows
    assert direct[1] == "104.7 / 102.7" and direct[-2:] == ["30/30", "agree"]
    assert ext_proc[-1] == "skipped" and "ext_proc: skipped: needs Python >= 3.12" in table.notes
    assert not table.bad_rows
    assert loadtool.table({"modes": {"direct": KIT}}) is None


def test_the_cache_says_what_is_missing_and_the_command_that_fixes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    assert ip.find() is None
    root = ip.install_dir()
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / ip.NAME).write_text("")
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer.json").write_text("{}")
    info = {"python": "3.12", "tokenizer_digest": "made-from-another-rule"}
    (root / "install.json").write_text(json.dumps(info))
    assert ip.find() is None, "a tokenizer of another rule is not used"
    info["tokenizer_digest"] = ip._digest(ip.tokenizer_spec())
    (root / "install.json").write_text(json.dumps(info))
    assert ip.find() == ip.LoadTool(root, "3.12")

