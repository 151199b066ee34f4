"""The prompt guard judged as a plugin (eppkit conformance --plugin, as pytest tests): one test per plugin check,
each against the same Envoy without the guard. Its refusals (a prompt over its limit) must be OpenAI-style JSON
that never reaches the backend; every other request it must pass untouched, at the stream's pace."""

from pathlib import Path

from eppkit import LuaFilter
from eppkit.conformance.testing import plugin_conformance_tests

GUARD = Path(__file__).parents[1] / "prompt_guard.lua"

# The guard's default limit (4,096 tokens): the verdict's 5,000-word prompt is refused, its other requests are not.
test_the_prompt_guard_conforms = plugin_conformance_tests(LuaFilter(path=GUARD))
