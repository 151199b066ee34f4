"""Zipkin's server as the kit runs it: loopback only, the cached jar, Java 17+, Maven as the fetcher."""

import io
from pathlib import Path

import pytest

from eppkit.ui import zipkin

pytestmark = pytest.mark.unit


def test_the_server_binds_loopback_with_ip_port_and_protocol_together(tmp_path):
    server = zipkin.ZipkinServer(tmp_path, port=24011, jar=tmp_path / "z.jar")
    argv = server.argv(tmp_path / "java")
    for flag in ("--armeria.ports[0].ip=127.0.0.1", "--armeria.ports[0].port=24011", "--armeria.ports[0].protocols=http"):
        assert flag in argv
    assert argv.index("-jar") > argv.index("-XX:TieredStopAtLevel=1"), "JVM flags come before the jar"
    assert zipkin.SERVER_ENV["STORAGE_TYPE"] == "mem"
    assert server.trace_url("ab" * 16) == f"http://127.0.0.1:24011/zipkin/traces/{'ab' * 16}"


def test_java_versions_are_read_in_both_forms():
    assert zipkin.java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert zipkin.java_major('java version "21" 2023-09-19') == 21
    assert zipkin.java_major('java version "1.8.0_392"') == 8
    assert zipkin.java_major("garbage") is None


def test_the_jar_comes_from_the_environment_or_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(zipkin.JAR_ENV, raising=False)
    assert zipkin.find_jar() is None
    cached = zipkin.jar_path()
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"jar")
    assert zipkin.find_jar() == cached
    mine = tmp_path / "mine.jar"
    monkeypatch.setenv(zipkin.JAR_ENV, str(mine))
    assert zipkin.find_jar() is None, "an explicit jar that is not there is not silently replaced"
    mine.write_bytes(b"jar")
    assert zipkin.find_jar() == mine


def test_a_cached_jar_is_not_fetched_again(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(zipkin.JAR_ENV, raising=False)
    zipkin.jar_path().parent.mkdir(parents=True)
    zipkin.jar_path().write_bytes(b"jar")
    monkeypatch.setattr(zipkin.subprocess, "Popen", lambda *a, **kw: pytest.fail("Maven must not run"))
    said = []
    assert zipkin.fetch(said.append) == zipkin.jar_path()
    assert "cached" in said[0]


def test_fetch_runs_maven_dependency_copy_and_reports_its_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(zipkin.JAR_ENV, raising=False)
    monkeypatch.setattr(zipkin.shutil, "which", lambda name: "/usr/bin/mvn")
    ran = []

    class FakeMaven:
        def __init__(self, cmd, **kw):
            ran.append(cmd)
            out = next(a for a in cmd if a.startswith("-DoutputDirectory=")).split("=", 1)[1]
            Path(out, zipkin.JAR_NAME).write_bytes(b"jar")
            self.stdout = io.BufferedReader(io.BytesIO(
                f"Downloading from central: https://repo/{zipkin.JAR_NAME}\n".encode()
                + b"Progress (1): 4.1/135 MB\rProgress (1): 135 MB\r\n"
                + f"Downloaded from central: https://repo/{zipkin.JAR_NAME} (135 MB at 8 MB/s)\n".encode()))
            self.returncode = 0

        def wait(self):
            return 0

    monkeypatch.setattr(zipkin.subprocess, "Popen", FakeMaven)
    said = []
    path = zipkin.fetch(said.append)
    assert path == zipkin.jar_path() and path.read_bytes() == b"jar"
    assert ran[0][:3] == ["/usr/bin/mvn", "-Dstyle.color=never", "dependency:copy"]
    assert f"-Dartifact={zipkin.ARTIFACT}" in ran[0]
    assert any("Downloaded from central" in line for line in said)
    assert any("4.1/135 MB" in line for line in said), "the first progress line is passed on"
    assert not (path.parent / "download").exists(), "the staging folder is gone"


def test_without_maven_fetch_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(zipkin.JAR_ENV, raising=False)
    monkeypatch.setattr(zipkin.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install maven"):
        zipkin.fetch(lambda _: None)


def test_starting_without_the_jar_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(zipkin.JAR_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="eppkit bootstrap --ui"):
        zipkin.ZipkinServer(tmp_path).start()
