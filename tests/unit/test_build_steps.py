"""builds.steps.build_folder: a build of the kit's cache lands whole or not at all."""

import json

import pytest
from eppkit.builds.steps import build_folder


def test_a_finished_build_replaces_the_old_one_with_its_info_and_without_its_scratch(tmp_path):
    out = tmp_path / "v1"
    out.mkdir()
    (out / "stale").write_text("old")
    with build_folder(out, tmp_path / "failed.log") as (tmp, log, info):
        (tmp / "kube-wrapper").mkdir()
        (tmp / "bin").write_text("new")
        log.write("compiled\n")
        info["go"] = "go1.26"
    assert sorted(p.name for p in out.iterdir()) == ["bin", "build-info.json", "build.log"]
    assert json.loads((out / "build-info.json").read_text())["go"] == "go1.26"
    assert not (tmp_path / "failed.log").exists()


def test_a_failed_build_keeps_its_log_and_leaves_the_old_one_alone(tmp_path):
    out = tmp_path / "v1"
    out.mkdir()
    (out / "bin").write_text("old")
    with pytest.raises(RuntimeError):
        with build_folder(out, tmp_path / "failed.log") as (tmp, log, info):
            log.write("step 2 failed\n")
            raise RuntimeError("boom")
    assert (out / "bin").read_text() == "old"
    assert (tmp_path / "failed.log").read_text() == "step 2 failed\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("build.")] == []
