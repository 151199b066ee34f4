"""One registry loader (eppkit.core.registry.load_members): a registry's own modules in order, then what outside
distributions declare under ``eppkit.<group>`` entry points; a broken one named with its distribution."""

from __future__ import annotations

import importlib
import sys

import pytest

from eppkit.core.registry import PluginError, load_members


def _write(path, text=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path holding a registry package and an outside distribution with entry points."""
    record = "import regtrace; regtrace.seen.append(__name__)\n"
    _write(tmp_path / "regtrace.py", "seen = []\n")
    for name in ("zeta", "alpha", "first", "_private", "registry"):
        _write(tmp_path / "regpkg" / f"{name}.py", record)
    _write(tmp_path / "regpkg" / "__init__.py")
    _write(tmp_path / "outside_plugin" / "__init__.py")
    _write(tmp_path / "outside_plugin" / "extra.py", record)
    _write(tmp_path / "outside_plugin" / "broken.py", "raise RuntimeError('no such setting')\n")
    _write(tmp_path / "outside_plugin-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: outside-plugin\nVersion: 1.0\n")
    _write(tmp_path / "outside_plugin-1.0.dist-info" / "entry_points.txt",
           "[eppkit.regtest]\nextra = outside_plugin.extra\n\n[eppkit.regbroken]\nbroken = outside_plugin.broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield importlib.import_module("regtrace")
    for name in [n for n in sys.modules if n.split(".")[0] in ("regpkg", "regtrace", "outside_plugin")]:
        del sys.modules[name]


def test_a_registrys_modules_load_in_order_then_the_outside_ones(site):
    package = importlib.import_module("regpkg")
    load_members("regpkg", package.__path__, group="regtest", skip=("registry",), order=("first",))
    assert site.seen == ["regpkg.first", "regpkg.alpha", "regpkg.zeta", "outside_plugin.extra"]


def test_an_outside_plugin_that_fails_to_load_is_named_with_its_distribution(site):
    package = importlib.import_module("regpkg")
    with pytest.raises(PluginError) as caught:
        load_members("regpkg", package.__path__, group="regbroken", skip=("registry",))
    message = str(caught.value)
    assert "eppkit.regbroken entry point 'broken' of outside-plugin (outside_plugin.broken)" in message
    assert "RuntimeError: no such setting" in message and "Hint: fix or uninstall outside-plugin" in message
