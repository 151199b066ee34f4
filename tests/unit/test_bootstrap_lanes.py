"""`eppkit bootstrap` runs its downloads beside its compiles, goes on past a part that fails, and says at its end
what it made and each part's time."""

from __future__ import annotations

import threading

from eppkit.cli import bootstrap
from eppkit.cli.bootstrap import Part


def test_a_download_runs_beside_the_compiles():
    compiling = threading.Event()
    fetched = threading.Event()

    def compile_part() -> str:
        compiling.set()
        assert fetched.wait(5), "the download did not run while this compile ran"
        return "compiled"

    def fetch_part() -> str:
        assert compiling.wait(5), "the download waited for the compiles"
        fetched.set()
        return "fetched"

    done = bootstrap._run_lanes([Part("compile", compile_part), Part("fetch", fetch_part, beside=True)])
    assert [(d.part.name, d.said, d.failed) for d in done] == [("compile", "compiled", ""), ("fetch", "fetched", "")]


def test_a_failed_part_is_told_and_the_others_still_run():
    ran = []

    def broken() -> str:
        raise RuntimeError("building GAIE's EPP failed: `go build` exited 1\nHint: ...")

    done = bootstrap._run_lanes([Part("gaie", broken), Part("after", lambda: ran.append(1) or "ok"),
                                 Part("download", lambda: "ok", beside=True)])
    assert ran == [1]
    assert [d.failed for d in done] == ["building GAIE's EPP failed: `go build` exited 1", "", ""]
    lines = bootstrap.summary(done, 12.0)
    assert lines[0].startswith("done in 12.0 s")
    assert "FAILED: building GAIE's EPP failed" in lines[1]
    assert lines[2].split()[0] == "after" and lines[2].split()[-1] == "cached"  # under a second: it was there
