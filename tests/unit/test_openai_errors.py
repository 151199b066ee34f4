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


def test_the_dynamic_module_names_each_status_as_the_python_services_do():
    """One error shape whichever answered: the Go filter's table (errors.go) is the Python services' (one table in
    each language: the services image carries Python files only, and Go embeds only from its own module)."""
    import re

    from eppkit.core.paths import PLUGINS
    from eppkit.services import openai_errors

    go = (PLUGINS / "dynamic_module" / "internal" / "callout" / "errors.go").read_text()
    table = re.search(r"var errorTypes = map\[int\]string\{(.*?)\n\}", go, re.S).group(1)
    assert {int(k): v for k, v in re.findall(r"(\d+): \"(\w+)\"", table)} == openai_errors._TYPES
