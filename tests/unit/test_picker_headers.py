"""The header names are declared once (services/picker/headers.py); the callout filters, which are
not Python, spell them too: these checks keep the spellings equal."""

import re
from pathlib import Path

import pytest
from eppkit.services.picker import headers

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LUA = (ROOT / "plugins" / "lua" / "callout.lua").read_text()
GO = "".join(p.read_text() for p in (ROOT / "plugins" / "dynamic_module" / "internal" / "callout").glob("*.go")
             if not p.name.endswith("_test.go"))


def lua_string(name: str) -> str:
    """The constant's literal, or its default when the mode's config can set it (``config.x or "..."``)."""
    return re.search(rf'^local {name} = (?:config\.\w+ or )?"([^"]+)"', LUA, re.M).group(1)


def go_string(name: str) -> str:
    return re.search(rf'\b{name}\s+= "([^"]+)"', GO).group(1)


def test_the_lua_callout_filter_spells_the_headers_as_the_picker_core():
    assert lua_string("DESTINATION_HEADER") == headers.DESTINATION
    assert lua_string("LB_METADATA") == headers.LB_METADATA
    assert lua_string("MODEL_HEADER") == headers.MODEL
    stages = re.search(r"^local STAGE_HEADERS = \{ (.+) \}", LUA, re.M).group(1)
    assert re.findall(r'"([^"]+)"', stages) == [headers.PREFILLER, headers.ENCODERS]


def test_the_go_callout_module_spells_the_headers_as_the_picker_core():
    assert go_string("DefaultDestinationHeader") == headers.DESTINATION
    assert go_string("DefaultLbMetadata") == headers.LB_METADATA
    assert go_string("ModelHeader") == headers.MODEL
    assert (go_string("PrefillerHeader"), go_string("EncodersHeader")) == (headers.PREFILLER, headers.ENCODERS)


def test_the_filters_forward_every_steering_header_by_its_prefix():
    # Both filters forward x-eppkit-* to the callout (Lua: key:sub(1, 9); Go: strings.HasPrefix).
    assert 'key:sub(1, 9) == "x-eppkit-"' in LUA and 'strings.HasPrefix(name, "x-eppkit-")' in GO
    for name in (headers.FORCE_ENDPOINT, headers.FORCE_PREFILLER, headers.FORCE_ENCODERS, headers.SHED):
        assert name.startswith("x-eppkit-")
