"""A runtime that cannot run here is a usage answer saying how to get it, never a traceback."""

from __future__ import annotations

from types import SimpleNamespace

from eppkit import runtimes
from eppkit.cli import main


def test_a_command_on_a_runtime_that_cannot_run_here_says_how_to_get_it_and_exits_2(monkeypatch, capsys):
    asked = []

    def get(name):
        asked.append(name)
        return SimpleNamespace(available=lambda: (False, "no Docker engine answers: start it"))

    monkeypatch.setattr(runtimes, "get", get)
    for command in (["run"], ["conformance"], ["up"]):
        assert main([*command, "--runtime", "docker"]) == 2
        err = capsys.readouterr().err
        assert f"eppkit {command[0]}: the docker runtime cannot run here: no Docker engine answers: start it" in err
        assert "Traceback" not in err
    assert asked == ["docker"] * 3
