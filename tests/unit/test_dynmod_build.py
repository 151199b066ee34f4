"""The dynamic-module build cache (eppkit.builds.dynmod) and the dynmod-callout mode plug-in.

No process runs here: `go` is replaced by a fake Popen, and the template is rendered, not run
(tests/e2e/test_mode_callouts.py builds the real module and runs it in Envoy).
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from eppkit.builds import dynmod as dynmod_build
from eppkit.builds import steps
from eppkit.components.ports import PortAllocator
from eppkit.modes import plan as plan_mode
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit


@pytest.fixture
def sources(tmp_path) -> Path:
    """A copy of plugins/dynamic_module to edit freely."""
    src = tmp_path / "src"
    shutil.copytree(dynmod_build.SOURCE_DIR, src)
    return src


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class FakePopen:
    """Stands in for `go mod download` / `go build`: logs, and writes the -o file on success."""

    calls: list[list[str]] = []
    fail_on: str | None = None  # a word of the command that makes it fail

    def __init__(self, cmd, cwd=None, env=None, stdout=None, stderr=None):
        FakePopen.calls.append(list(cmd))
        self.rc = 0
        stdout.write(f"fake {' '.join(cmd[1:3])}\n")
        if FakePopen.fail_on and FakePopen.fail_on in cmd:
            stdout.write("internal/callout/filter.go:1:1: undefined: shared.Nope\n")
            self.rc = 1
        elif "-o" in cmd:
            out = Path(cmd[cmd.index("-o") + 1])
            out.write_bytes(b"\x7fELF fake")
            out.with_suffix(".h").write_text("/* cgo header */")

    def wait(self, timeout=None):
        return self.rc


@pytest.fixture
def fake_go(monkeypatch):
    FakePopen.calls, FakePopen.fail_on = [], None
    monkeypatch.setattr(steps.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(dynmod_build, "go_version", lambda go, env: "go-fake")
    monkeypatch.setattr(dynmod_build.shutil, "which", lambda name: "/usr/bin/go-fake" if name == "go" else None)
    return FakePopen


def test_the_hash_covers_sources_but_not_tests_or_experiments(sources):
    names = {str(p.relative_to(sources)) for p in dynmod_build.source_files(sources)}
    assert {"go.mod", "go.sum", "main.go", "internal/callout/filter.go"} <= names
    assert not any(n.endswith("_test.go") or n.startswith("experiments") for n in names)

    before = dynmod_build.source_hash(sources)
    (sources / "internal/callout/filter_test.go").write_text("package callout // edited test\n")
    (sources / "experiments/multipart/run.py").write_text("# edited experiment\n")
    assert dynmod_build.source_hash(sources) == before, "tests and experiments must not force a rebuild"
    with (sources / "internal/callout/errors.go").open("a") as fh:
        fh.write("// edited\n")
    assert dynmod_build.source_hash(sources) != before, "a source edit must rebuild"


def test_find_answers_only_for_the_current_sources(sources, cache):
    assert dynmod_build.find(sources) is None
    lib = dynmod_build.build_dir(sources) / dynmod_build.LIB_NAME
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"so")
    assert dynmod_build.find(sources) == lib
    assert lib.is_relative_to(cache / "dynmod")
    (sources / "main.go").write_text((sources / "main.go").read_text() + "// edited\n")
    assert dynmod_build.find(sources) is None


def test_build_compiles_once_then_reuses(sources, cache, fake_go):
    messages = []
    lib = dynmod_build.build(messages.append, source_dir=sources)
    assert lib == dynmod_build.find(sources) and lib.read_bytes().startswith(b"\x7fELF")
    assert [c[1] for c in fake_go.calls] == ["mod", "build"]
    build_cmd = fake_go.calls[1]
    assert "-buildmode=c-shared" in build_cmd and "-ldflags=-X=runtime.godebugDefault=cgocheck=0" in build_cmd
    info = json.loads((lib.parent / "build-info.json").read_text())
    assert info["source_hash"] == dynmod_build.source_hash(sources) and info["go"] == "go-fake"
    assert not list(lib.parent.glob("*.h")), "cgo's header is not part of the cache"
    assert any("compiling" in m for m in messages) and any(m.startswith("dynmod: built ") for m in messages)

    fake_go.calls.clear()
    assert dynmod_build.build(messages.append, source_dir=sources) == lib
    assert fake_go.calls == [], "a cached build must not run go again"


def test_a_failed_build_says_why_and_leaves_no_cache_entry(sources, cache, fake_go):
    fake_go.fail_on = "-buildmode=c-shared"
    with pytest.raises(dynmod_build.DynmodBuildError) as err:
        dynmod_build.build(lambda m: None, source_dir=sources)
    text = str(err.value)
    assert "exited 1" in text and "undefined: shared.Nope" in text and "Hint:" in text
    assert dynmod_build.find(sources) is None
    failed_log = dynmod_build.build_dir(sources).parent / f"{dynmod_build.build_dir(sources).name}.failed.log"
    assert "undefined: shared.Nope" in failed_log.read_text()


def test_without_go_the_error_says_how_to_get_it(sources, cache, monkeypatch):
    monkeypatch.setattr(dynmod_build.shutil, "which", lambda name: None)
    with pytest.raises(dynmod_build.DynmodBuildError, match=r"(?s)`go` is not on PATH.*Hint: install Go"):
        dynmod_build.build(lambda m: None, source_dir=sources)


# --- the mode plug-in and its template -------------------------------------------------------

BACKENDS = [
    Endpoint("vllm-0", "127.0.0.1", 8001, model="m-a"),
    Endpoint("vllm-1", "127.0.0.1", 8002, model="m-b"),
]


@pytest.fixture
def no_build(monkeypatch):
    fake = Path("/cache/dynmod/x/libeppkit_callout.so")
    monkeypatch.setattr(dynmod_build, "build", lambda progress=print, **kw: fake)


def render(options: dict):
    plan = plan_mode(Topology(mode="dynmod-callout", options=options), PortAllocator(), BACKENDS)
    base = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}
    return yaml.safe_load(kit.render("dynmod-callout", {**base, **plan.envoy_vars})), plan


def module_filter(config: dict) -> dict:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    [f] = [f for f in hcm["http_filters"] if f["name"] == "eppkit.dynmod_callout"]
    return f["typed_config"]


def test_plan_starts_the_callout_and_hands_envoy_the_module_by_absolute_path(no_build):
    config, plan = render({"scorer": "prefix-cache-scorer", "pick_latency_ms": 5})
    [spec] = plan.services
    assert (spec.name, spec.module) == ("callout", "eppkit.services.callout")
    assert spec.args[:4] == ["--endpoints", "vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002", "--scorer", "prefix-cache-scorer"]
    assert spec.args[-2:] == ["--pick-latency", "5"]
    typed = module_filter(config)
    assert typed["dynamic_module_config"] == {"module": {"local": {"filename": "/cache/dynmod/x/libeppkit_callout.so"}},
                                              "do_not_close": True}
    assert typed["filter_name"] == "eppkit_callout"
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    assert clusters["callout"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
        "socket_address"]["port_value"] == spec.port
    assert clusters["picked"]["type"] == "STATIC"  # its load balancing: test_picked_cluster.py


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, {"timeout_ms": 1000, "failure_mode_allow": False, "destination_header": "x-gateway-destination-endpoint",
              "lb_metadata": "envoy.lb", "forward_headers": ["test-epp-endpoint-selection"]}),
        ({"failure_mode_allow": True, "callout_timeout_ms": 250}, {"timeout_ms": 250, "failure_mode_allow": True}),
        ({"restrict_to_pool": True}, {"allowed_endpoints": ["127.0.0.1:8001", "127.0.0.1:8002"]}),
    ],
)
def test_options_reach_the_module_as_its_json_config(no_build, options, expected):
    config, _ = render(options)
    value = module_filter(config)["filter_config"]["value"]
    parsed = json.loads(value)
    assert parsed["cluster"] == "callout" and parsed["path"] == "/pick"
    assert {k: parsed[k] for k in expected} == expected


def test_with_body_routing_each_model_has_its_picked_and_round_robin_cluster(no_build):
    config, plan = render({"body_routing": True})
    names = [c["name"] for c in config["static_resources"]["clusters"]]
    assert {"pool_m-a", "pool_m-b", "picked"} <= set(names)
    assert plan.services[0].args[1] == "vllm-0=127.0.0.1:8001@m-a,vllm-1=127.0.0.1:8002@m-b"


def test_the_production_module_carries_no_experiment_code():
    # The multipart probe is a module of its own (experiments/multipart/module): nothing the
    # production build compiles may import it.
    for path in dynmod_build.source_files():
        if path.suffix == ".go":
            imports = re.findall(r'"(github\.com/[^"]+)"', path.read_text())
            assert not [i for i in imports if "/experiments/" in i], f"{path} imports experiment code"
    probe = dynmod_build.source_files(package="./experiments/multipart/module")
    assert any(p.match("experiments/multipart/probe/probe.go") for p in probe)


def test_a_package_and_a_library_name_get_their_own_cache_entry(sources, cache):
    kit = dynmod_build.build_dir(sources)
    probe = dynmod_build.build_dir(sources, package="./experiments/multipart/module", lib_name="libprobe.so")
    assert kit != probe
    (sources / "experiments/multipart/probe/probe.go").write_text("package probe // edited\n")
    assert dynmod_build.build_dir(sources) == kit, "an experiment edit must not rebuild the kit's module"
    assert dynmod_build.build_dir(sources, package="./experiments/multipart/module", lib_name="libprobe.so") != probe


def test_a_folder_without_go_mod_is_refused_before_go_runs(tmp_path, cache, fake_go):
    with pytest.raises(dynmod_build.DynmodBuildError, match="no go.mod"):
        dynmod_build.build(lambda m: None, source_dir=tmp_path)
    assert fake_go.calls == []
