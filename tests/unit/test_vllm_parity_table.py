"""The parity comparison's arithmetic (tests/support/parity.py) and its tables in docs/mocks.md. No processes:
the live comparison is tests/e2e/test_vllm_backend.py."""

from pathlib import Path

import pytest

from tests.support import parity

pytestmark = pytest.mark.unit

DOC = Path(__file__).parents[2] / "docs" / "mocks.md"


def test_docs_list_exactly_the_known_differences():
    assert parity.render_into(DOC.read_text()) == DOC.read_text(), "regenerate: python -m tests.support.parity"


def test_an_answer_flattens_to_types_with_the_values_that_matter_kept():
    out = parity.flatten({"object": "chat.completion", "choices": [{"finish_reason": "length", "message": {
        "content": "", "refusal": None}}], "usage": {"prompt_tokens": 3}, "data": []}, "body", {})
    assert out == {"body.object": "'chat.completion'", "body.choices[].finish_reason": "'length'",
                   "body.choices[].message.content": "str (empty)", "body.choices[].message.refusal": "null",
                   "body.usage.prompt_tokens": "int", "body.data": "list (empty)"}


def test_differences_are_filed_by_path_when_alike_and_by_case_when_not_and_a_status_stands_for_its_body():
    ours = {"a": {"status": "200", "body.x": "null", "body.e": "str"}, "b": {"status": "400", "body.x": "null",
                                                                            "body.e": "int"},
            "c": {"status": "400", "body.y": "str"}}
    vllm = {"a": {"status": "200", "body.e": "int"}, "b": {"status": "400", "body.e": "str"},
            "c": {"status": "200", "body.z": "int"}}
    assert parity.differences(ours, vllm) == {
        "a: body.e": ("str", "int"), "b: body.e": ("int", "str"),  # differs otherwise per case
        "body.x": ("null", parity.ABSENT),  # alike wherever it differs
        "c: status": ("400", "200")}  # its body follows from it


def test_a_known_difference_may_stand_for_a_group_and_one_that_went_away_is_reported():
    known = [parity.Known("metric.*", parity.ABSENT, "*", parity.REMAINING, "why"),
             parity.Known("stream[first].x", "str", "null", parity.REMAINING, "why")]
    found = {"metric.vllm:a": (parity.ABSENT, "counter {}"), "stream[first]x": ("str", "null")}
    new, gone = parity.unexplained(found, known)
    assert new == ["stream[first]x: ours 'str', vLLM 'null'"]  # brackets are literal, not a character class
    assert gone == ["stream[first].x: ours 'str', vLLM 'null'"]


def test_metric_families_are_types_and_label_names_without_created_series():
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    Counter("vllm:x", "x", ["engine", "model_name"], registry=registry).labels("0", "m").inc()
    Histogram("vllm:h", "h", ["model_name"], registry=registry).labels("m").observe(0.5)
    assert parity.metric_shape(generate_latest(registry).decode()) == {  # as vLLM and the mock expose them
        "metric.vllm:x": "counter {engine, model_name}", "metric.vllm:h": "histogram {model_name}"}
