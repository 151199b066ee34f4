"""bench/fresh_machine.py times each step of a command in one bash, and stops at the first that fails."""

from __future__ import annotations

from bench import fresh_machine as fm


def test_each_step_is_timed_until_one_fails(tmp_path):
    times, rc = fm.run_steps(["true", "echo hello", "false", "echo never"], tmp_path, fm.fresh_env(tmp_path),
                             tmp_path / "log")
    assert [(t["step"], t["exit"]) for t in times] == [("true", 0), ("echo hello", 0), ("false", 1)]
    assert rc == 1 and "hello" in (tmp_path / "log").read_text() and "never" not in (tmp_path / "log").read_text()
