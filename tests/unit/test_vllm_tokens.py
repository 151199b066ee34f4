"""Deterministic tokens: the same seed and prompt give the same sequence anywhere."""

import pytest
from eppkit.services.openai_server import tokens

pytestmark = pytest.mark.unit


def test_same_seed_and_prompt_give_same_tokens():
    assert tokens.output_tokens(3, "hello world", 20) == tokens.output_tokens(3, "hello world", 20)


def test_shorter_request_is_a_prefix_of_a_longer_one():
    # a prefiller (max_tokens 1) and a decoder (max_tokens n) agree on the first token
    assert tokens.output_tokens(3, "p", 1) == tokens.output_tokens(3, "p", 50)[:1]


def test_different_seed_or_prompt_gives_different_tokens():
    base = tokens.output_tokens(3, "hello world", 20)
    assert tokens.output_tokens(4, "hello world", 20) != base
    assert tokens.output_tokens(3, "hello there", 20) != base


def test_prompt_text_flattens_chat_and_ignores_media():
    body = {"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
    ]}
    assert tokens.prompt_text_of(body) == "system: be brief\nuser: what is"
    assert tokens.count_tokens("Hello, world!") == 4


def test_completion_prompt_forms():
    assert tokens.prompt_text_of({"prompt": "a b"}) == "a b"
    assert tokens.prompt_text_of({"prompt": ["a", "b"]}) == "a b"
    assert tokens.prompt_text_of({"prompt": [1, 2, 3]}) == "1 2 3"
    assert tokens.prompt_text_of({"prompt": [[1, 2], [3]]}) == "1 2 3"


@pytest.mark.parametrize("body", [
    {"messages": [[626945, False], "hi", None]},
    {"messages": "not a list"},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}, {"type": "text", "text": None}]}]},
    {"messages": [{"role": 3, "content": {"a": 1}}]},
    {"prompt": [None, {"a": 1}, [1, "x"]]},
])
def test_prompt_text_takes_any_json_without_raising(body):
    # The frontend tokenizes bodies nobody has validated yet (the worker refuses them later);
    # found by tests/e2e/test_fuzz.py as the frontend's 500 in sidecar mode.
    assert isinstance(tokens.prompt_text_of(body), str)
