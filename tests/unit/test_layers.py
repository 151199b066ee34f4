"""The structure holds: every package has a layer, layers import downward only, there is no import circle
(docs/architecture.md; the install and the stale-name checks are tests/integration/test_structure.py)."""

from __future__ import annotations

import pytest

from tests.support.imports import ROOT, cycles, graph, layer_of

pytestmark = pytest.mark.unit

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layers() -> list[list[str]]:
    """docs/architecture.md's layer list, top first: each layer a list of its rooms (packages)."""
    text = ARCHITECTURE.read_text()
    block = text.split("<!-- layers:", 1)[1].split("```", 2)[1]
    return [[room.strip() for room in line.split("|")] for line in block.strip().splitlines()]


def room_of(module: str, rooms: list[str]) -> str | None:
    return max((r for r in rooms if module == r or module.startswith(r + ".")), key=len, default=None)


def test_every_package_of_the_kit_has_a_layer():
    placed = {room for layer in layers() for room in layer}
    packages = {".".join(m.split(".")[:2]) for m in graph() if m.count(".") >= 1}
    packages -= {"eppkit.__main__"}  # `python -m eppkit`: the command itself, above everything
    assert sorted(packages - placed) == [], "place these in docs/architecture.md's layer list"


def test_imports_go_down_only_and_rooms_of_one_layer_stay_apart():
    order = layers()
    problems = []
    for module, imported in graph().items():
        mine = layer_of(module, order)
        for target in imported:
            theirs = layer_of(target, order)
            if mine is None or theirs is None:
                continue
            if theirs < mine:
                problems.append(f"{module} imports {target}, a layer above it")
            elif theirs == mine and room_of(module, order[mine]) != room_of(target, order[mine]):
                problems.append(f"{module} imports {target}, another room of its own layer")
    assert problems == []


def test_there_is_no_import_circle():
    assert cycles(graph()) == []
