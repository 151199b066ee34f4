"""bench/fresh_machine.py runs README's own commands, each step timed, with every cache in the new HOME."""

from __future__ import annotations

from pathlib import Path

from bench import fresh_machine as fm


def test_it_runs_the_readmes_two_commands_step_by_step():
    first = fm.readme_command(1)
    assert first.startswith("python3 -m venv .venv") and first.endswith("eppkit compare")
    assert fm.steps_of(first)[-2:] == ["eppkit bootstrap", "eppkit compare"]
    assert fm.readme_command(2) == "pytest"


def test_every_cache_is_inside_the_new_home(tmp_path):
    env = fm.fresh_env(tmp_path)
    for name in ("HOME", "XDG_CACHE_HOME", "PIP_CACHE_DIR", "GOPATH", "GOMODCACHE", "GOCACHE", "npm_config_cache"):
        assert Path(env[name]).is_relative_to(tmp_path), name
    assert not any(k.startswith(("EPPKIT_", "VIRTUAL_ENV")) for k in env)

