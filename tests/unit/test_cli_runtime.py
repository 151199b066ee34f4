"""A runtime that cannot run here is a usage answer saying how to get it, never a traceback; ``--runtime`` is one
option, read by one parser, for the commands and the pytest plugin."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from eppkit import runtimes
from eppkit.cli import main


def test_a_command_on_a_runtime_that_cannot_run_here_says_how_to_get_it_and_exits_2(monkeypatch, capsys):
    asked = []

    def get(name, cluster=None):
        asked.append(name)
        return SimpleNamespace(available=lambda: (False, "no Docker engine answers: start it"))

    monkeypatch.setattr(runtimes, "get", get)
    for command in (["run"], ["conformance"], ["up"]):
        assert main([*command, "--runtime", "docker"]) == 2
        err = capsys.readouterr().err
        assert f"eppkit {command[0]}: the docker runtime cannot run here: no Docker engine answers: start it" in err
        assert "Traceback" not in err
    assert asked == ["docker"] * 3


def test_runtime_is_one_option_for_every_front_end_read_by_one_parser():
    from eppkit import options

    declared = [o for o in options.OPTIONS if o.flag == "--runtime"]
    assert len(declared) == 1 and declared[0].commands == options.TESTBEDS | {options.PLUGIN}
    assert declared[0].type is options.runtimes_named
    assert options.runtimes_named("local") == ("local",)
    assert options.runtimes_named("docker, local,docker") == ("docker", "local")  # each once, as given
    assert options.runtimes_named("all") == runtimes.ALL_RUNTIMES and "kubernetes" not in runtimes.ALL_RUNTIMES
    with pytest.raises(argparse.ArgumentTypeError, match="unknown runtime 'lokal': choose from local, docker"):
        options.runtimes_named("lokal")


def test_a_command_takes_one_runtime_and_says_so_when_given_several(capsys):
    from eppkit import options
    from tests.support import kit

    assert options.runtime(kit.parse("run")) == runtimes.RUNTIMES[0]
    assert options.runtime(kit.parse("conformance", "--runtime", "docker")) == "docker"
    with pytest.raises(ValueError, match="--runtime local,docker: a command's testbeds run on one runtime"):
        options.runtime(kit.parse("run", "--runtime", "local,docker"))
    with pytest.raises(SystemExit):
        main(["up", "--runtime", "all"])
    assert "a command's testbeds run on one runtime; name one" in capsys.readouterr().err


def test_the_plugin_reads_its_ini_key_with_the_same_parser():
    from eppkit.pytest_plugin.options import PluginValues

    class Config:
        ini = ""

        def getoption(self, flag):
            return None

        def getini(self, key):
            return self.ini

    config = Config()
    assert PluginValues(config).runtime == ("local",)  # the table's default, read as a flag's would be
    config.ini = "local, docker"
    assert PluginValues(config).runtime == ("local", "docker")
