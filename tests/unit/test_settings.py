"""The kit's settings (eppkit/core/settings.py): every EPPKIT_* variable read once into one frozen object, each with
its meaning and default in docs/settings.md's one table; a value the kit cannot use is refused naming its variable."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from eppkit.core import settings as kit_settings
from eppkit.core.settings import Settings, SettingsError
from tests.support.imports import ROOT

pytestmark = pytest.mark.unit


@pytest.fixture
def restored():
    """What was given (kit_settings.given) and read, as it was, after the test."""
    given = dict(kit_settings._given)
    yield
    kit_settings._given.clear()
    kit_settings._given.update(given)
    kit_settings.reread()


def test_an_empty_environment_gives_every_default():
    read = Settings.read({})
    assert read == Settings()
    assert (read.service_start, read.event_loop, read.image_source, read.image_repo) == (
        "fork", "uvloop", "auto", "eppkit")
    assert read.runs is read.kubeconfig is read.otlp_endpoint is read.test_session is None
    assert read.env() == {}  # a default is nothing to hand a child


def test_defaults_that_depend_on_where_the_process_is_are_made_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    read = Settings.read({})
    assert read.runs_dir() == tmp_path.resolve() / "runs" and read.reports_dir() == tmp_path.resolve() / "reports"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Settings.read({}).cache_dir() == tmp_path / "xdg" / "eppkit"


def test_each_variable_lands_on_its_field_as_its_type():
    read = Settings.read({"EPPKIT_CACHE": "/c", "EPPKIT_RUNS": "~/r", "EPPKIT_IMAGE_SOURCE": " Offline ",
                          "EPPKIT_IMAGE_REPO": "ci-42/", "EPPKIT_KUBECONFIG": " /k ", "EPPKIT_SERVICE_START": "exec",
                          "EPPKIT_VEGETA": "/bin/vegeta", "EPPKIT_KUBE_NODE": ""})
    assert read.cache == Path("/c") and read.runs == Path("~/r").expanduser()
    assert (read.image_source, read.image_repo, read.kubeconfig, read.service_start) == (
        "offline", "ci-42", "/k", "exec")
    assert read.of("EPPKIT_VEGETA") == Path("/bin/vegeta") and read.kube_node is None  # empty: unset
    with pytest.raises(KeyError, match="EPPKIT_NOPE is no setting"):
        read.of("EPPKIT_NOPE")


@pytest.mark.parametrize("variable,value,choices", [
    ("EPPKIT_IMAGE_SOURCE", "sometimes", "auto, registry, offline"),
    ("EPPKIT_SERVICE_START", "spawn", "fork, exec"),
    ("EPPKIT_EVENT_LOOP", "trio", "uvloop, asyncio"),
])
def test_a_value_the_kit_cannot_use_is_refused_naming_the_variable(variable, value, choices):
    with pytest.raises(SettingsError, match=re.escape(f"{variable}={value!r}: choose from {choices}")):
        Settings.read({variable: value})


def test_the_environment_is_read_once(monkeypatch, restored):
    reads = []
    real = Settings.read.__func__

    def counted(cls, environ=None):
        reads.append(1)
        return real(cls, environ)

    monkeypatch.setattr(Settings, "read", classmethod(counted))
    kit_settings.reread()
    first = kit_settings.settings()
    monkeypatch.setitem(os.environ, "EPPKIT_RUNS", "/elsewhere")  # not read again by itself
    assert kit_settings.settings() is first and first.runs != Path("/elsewhere") and len(reads) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.runs = Path("/x")  # type: ignore[misc]


def test_what_a_front_end_is_given_holds_over_a_reread_and_goes_to_a_child(tmp_path, restored):
    kit_settings.given(runs=tmp_path)
    assert kit_settings.reread().runs == tmp_path
    assert kit_settings.settings().env()["EPPKIT_RUNS"] == str(tmp_path)


def test_docs_settings_md_is_the_one_table_of_every_variable():
    text = (ROOT / "docs" / "settings.md").read_text()
    rows = re.findall(r"^\| `(EPPKIT_[A-Z_]+)` \|", text, re.M)
    assert rows == [variable for variable, _, _ in Settings.table()]
    for variable, meaning, default in Settings.table():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{variable}` |"))
        assert meaning in row and default in row, f"docs/settings.md's row of {variable} is not the field's"
    for page in ("README.md", "docs/api.md"):
        assert "settings.md" in (ROOT / page).read_text(), f"{page} links docs/settings.md"


# What the settings replace: no module of the kit reads an EPPKIT_* variable from the environment by itself, and the
# one write into this process's environment is the test session's tag (its reason at the write).
def _sources():
    for folder in ("eppkit", "services", "observability"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_only_the_settings_read_the_kits_variables():
    readers = [f"{name}: {line.strip()}" for name, text in _sources() for line in text.splitlines()
               if re.search(r"(environ\.get|getenv|environ\[)\(?\s*(\"EPPKIT_|[A-Z_]*ENV\b|SESSION_TAG)(?!\]\s*=[^=])",
                            line)]
    assert readers == []


def test_nothing_writes_into_the_processs_environment_but_the_session_tag_and_a_forked_childs_own():
    writers = [f"{name}: {line.strip()}" for name, text in _sources() for line in text.splitlines()
               if re.search(r"os\.environ(\[[^]]+\]\s*=[^=]|\.(update|setdefault|pop|clear)\()", line)]
    assert writers == [
        "eppkit/builds/_gguf_to_hf.py: os.environ.setdefault(\"HF_HUB_OFFLINE\", \"1\")",
        "eppkit/builds/_gguf_to_hf.py: os.environ.setdefault(\"TRANSFORMERS_OFFLINE\", \"1\")",
        "eppkit/components/zygote.py: os.environ.clear()  # the child's own spawn environment, as exec would have "
        "given it",
        "eppkit/components/zygote.py: os.environ.update(request[\"env\"])",
        "eppkit/pytest_plugin/session.py: os.environ[SESSION_TAG] = tag",
    ]


def test_the_command_line_tells_a_bad_variable_by_its_name_before_it_does_anything(monkeypatch, capsys):
    from eppkit.cli import main

    monkeypatch.setattr(kit_settings, "_current", None)  # read at the command's start, as in a new process
    monkeypatch.setitem(os.environ, "EPPKIT_EVENT_LOOP", "trio")
    with pytest.raises(SystemExit) as stopped:
        main(["doctor"])
    assert stopped.value.code == 2
    assert "EPPKIT_EVENT_LOOP='trio': choose from uvloop, asyncio" in capsys.readouterr().err
