"""A runtime is one complete provider (docs/api.md, "A runtime of your own"): every runtime answers all that the
testbed, the pytest plugin, the leak check, the CLI and compare ask of it; no runtime imports another; nobody outside
eppkit/runtimes/ names a runtime or probes one with getattr."""

from __future__ import annotations

import re

import pytest

from eppkit import runtimes
from eppkit.runtimes.docker import DockerLauncher
from eppkit.runtimes.kubernetes import KubernetesLauncher
from eppkit.runtimes.launching import Launcher
from eppkit.runtimes.local import LocalLauncher
from eppkit.runtimes.registry import Runtime
from tests.support.imports import ROOT, graph


def _members(protocol) -> set[str]:
    declared = {n for n in vars(protocol) if not n.startswith("_")}
    return declared | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("name", runtimes.RUNTIMES)
def test_every_runtime_answers_the_whole_provider_interface(name):
    provider = runtimes.get(name)
    assert not _members(Runtime) - set(dir(provider))
    assert provider.name == name


@pytest.mark.parametrize("launcher", [LocalLauncher, DockerLauncher, KubernetesLauncher])
def test_every_kit_launcher_answers_all_the_testbed_asks(launcher):
    assert not _members(Launcher) - set(dir(launcher))


def test_all_means_every_runtime_that_says_it_is_one_of_all():
    assert runtimes.ALL_RUNTIMES == tuple(r.name for r in runtimes.all_runtimes() if r.capabilities.in_all)
    assert runtimes.RUNTIMES[0] == "local"  # the default


def test_a_runtime_imports_the_common_recipes_never_another_runtime():
    edges = graph()
    kit = {f"eppkit.runtimes.{r}" for r in runtimes.RUNTIMES}
    for module in kit:
        assert not edges[module] & (kit - {module}), (module, edges[module] & kit)


def test_the_leak_check_asks_no_runtime_that_never_ran_here(monkeypatch):
    import sys

    from eppkit.runtimes import common

    monkeypatch.delitem(sys.modules, "eppkit.no-such-component", raising=False)
    assert common.session_leftovers("eppkit.no-such-component", "things", str) == ""


# What only a runtime may know: its name compared, its modules named as strings, a probe of what it has.
_NAMED = re.compile(r"""(==|!=|\bin\b)\s*\(?["'](local|docker|kubernetes)["']"""
                    r"""|["'](local|docker|kubernetes)["']\s*(==|!=)"""
                    r"""|["']eppkit\.(components\.container|cluster\.pod)["']""")
_PROBED = re.compile(r"getattr\((self\.launcher|launcher|handle\.process|proc|self\.envoy\.process)\b")


def test_nothing_outside_the_runtimes_names_a_runtime_and_the_testbed_probes_none():
    found = []
    for path in sorted((ROOT / "eppkit").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("eppkit/runtimes/", "eppkit/conformance/")):
            continue
        found += [f"{relative}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if _NAMED.search(line)]
    bed_module = ROOT / "eppkit/runtimes/testbed.py"
    found += [f"{bed_module.name}:{n}: {line.strip()}" for n, line in enumerate(bed_module.read_text().splitlines(), 1)
              if _PROBED.search(line)]
    assert found == []
