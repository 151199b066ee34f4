"""Relaying an upstream's error: its message is kept, its JSON is not nested in ours."""

import json

import pytest
from eppkit.services.openai_errors import error_body, upstream_message

pytestmark = pytest.mark.unit


def test_upstream_openai_error_gives_its_message():
    text = json.dumps(error_body(500, "injected failure: internal server error"))
    assert upstream_message(text) == "injected failure: internal server error"


@pytest.mark.parametrize("text", ["upstream connect error", "<html>oops</html>", "[1, 2]", '{"error": "flat"}', "null"])
def test_anything_else_is_relayed_as_text(text):
    assert upstream_message(text) == text


def test_long_bodies_are_shortened():
    assert upstream_message("x" * 1000, limit=50) == "x" * 50
    assert upstream_message(json.dumps(error_body(502, "y" * 1000)), limit=20) == "y" * 20
