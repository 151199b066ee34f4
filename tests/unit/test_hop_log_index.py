"""Envoy's log read as it grows: each hop line parsed once, a lookup reading only what was written since."""

from __future__ import annotations

import json

from eppkit.gateway import hop


def _line(trace: str, code: int = 200) -> str:
    return json.dumps({hop.MARKER: 1, "traceparent": f"00-{trace}-0000000000000001-01", "code": code})


def test_a_lookup_finds_what_was_written_since_the_last_one(tmp_path, monkeypatch):
    log = tmp_path / "envoy.log"
    log.write_text("[info] starting\n" + _line("a") + "\n" + _line("b")[:10])  # b's line half written
    index = hop.LogIndex(log)
    assert index.find("a")["code"] == 200 and index.find("b") is None
    parsed = []
    monkeypatch.setattr(hop, "parse", lambda line: parsed.append(line) or hop.Hop(json.loads(line), {})
                        if line.startswith("{") else None)
    with log.open("a") as f:
        f.write(_line("b")[10:] + "\n" + _line("a", 503) + "\n")
    assert index.find("b") is not None and index.find("a")["code"] == 503  # the newest record of a trace id
    assert len(parsed) == 2  # only the lines written since: the earlier ones are not parsed again
    assert [h.trace_id for h in index.hops] == ["a", "b", "a"]


def test_a_new_log_at_the_same_path_is_read_from_its_start(tmp_path):
    log = tmp_path / "envoy.log"
    log.write_text(_line("a") + "\n" + _line("b") + "\n")
    index = hop.index(log)
    assert len(index.update().hops) == 2
    log.write_text(_line("c") + "\n")
    assert [h.trace_id for h in index.update().hops] == ["c"]
    assert hop.index(log) is index  # one index per log
