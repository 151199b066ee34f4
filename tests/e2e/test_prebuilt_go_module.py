"""A third-party Go dynamic module, built as its own docs and Envoy's Go SDK docs build one (a plain `go build
-buildmode=c-shared`, none of the kit's flags: Go's cgo pointer check on by default in it), given to the verdict as a
prebuilt .so: it loads in the kit's Envoy, which runs it with GODEBUG=cgocheck=0 (eppkit.gateway.go_modules), and
its plugin verdict conforms. Its peer: the same .so where GODEBUG keeps the check on (cgocheck=1, as an Envoy run
without that setting has it) does not load, named with Go's panic and the fix. The module is the go-tenant-gate
example's, built into the test's own folder."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from eppkit.conformance import report as rp
from eppkit.conformance.suite import CONFORMS, NOT_LOADED, WARNINGS, run
from eppkit.conformance.target import PluginTarget
from eppkit.gateway import go_modules
from eppkit.gateway.user_filters import DynamicModule
from eppkit.pytest_plugin.state import require
from tests.support.imports import ROOT
from tests.support.verdicts import local_beds

pytestmark = pytest.mark.e2e

EXAMPLE = ROOT / "examples" / "go-tenant-gate" / "module"
KEY = "sk-team-a"


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory) -> Path:
    """libtenantgate.so from `go build -buildmode=c-shared -o libtenantgate.so .`, in a copy of the example."""
    go = shutil.which("go")
    require(go is not None, "no go on PATH: the prebuilt module is built here")
    src = tmp_path_factory.mktemp("prebuilt") / "module"
    shutil.copytree(EXAMPLE, src)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"}
    built = subprocess.run([go, "build", "-buildmode=c-shared", "-o", "libtenantgate.so", "."], cwd=src, env=env,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    library = src / "libtenantgate.so"
    # None of the kit's flags: the kit's own builds carry cgocheck=0 as the Go runtime's default; this one does not.
    assert go_modules.CGOCHECK_OFF.encode() not in library.read_bytes()
    return library


@pytest.fixture(scope="module")
def make_bed():
    with local_beds("jaeger-prebuilt-go-module") as made:
        yield made


def judge(make_bed, library: Path) -> dict:
    make, beds = make_bed
    gate = DynamicModule(path=library, filter_name="tenant_gate", config={"tenants": {KEY: "team-a"}})
    try:
        return run(PluginTarget(filters=(gate,), let_through=(f"authorization: Bearer {KEY}",)), make,
                   runtime="local")
    finally:
        while beds:
            beds.pop().stop()


@pytest.mark.eppkit_alone("a stream's pace within 5 ms of the floor's")
def test_a_prebuilt_go_module_built_without_the_kit_flags_loads_and_conforms(make_bed, prebuilt):
    report = judge(make_bed, prebuilt)
    assert report["verdict"] in (CONFORMS, WARNINGS), rp.text(report)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["no-module-errors"] == "pass" and statuses["streams-served"] == "pass", statuses


def test_a_prebuilt_go_module_with_the_cgo_check_on_is_refused_with_its_panic_and_the_fix(make_bed, prebuilt,
                                                                                          monkeypatch):
    monkeypatch.setenv("GODEBUG", "cgocheck=1")  # Go's default, kept as someone's choice: the module's load aborts
    report = judge(make_bed, prebuilt)
    assert report["verdict"] == NOT_LOADED, rp.text(report)
    message = report["checks"][0]["message"]
    assert message.startswith(f"does not load: dynamic module tenantgate ({prebuilt}, filter_name tenant_gate) "
                              "does not load in Envoy "), message
    said = message.split(" Envoy says:\n", 1)[1].splitlines()
    panic = next(line for line in said if line.startswith("  panic: "))
    assert "cgo" in panic and "unpinned Go" in panic, panic  # Go's own words
    assert any(line.startswith("  at runtime.cgoCheck") for line in said), said
    assert not any("][backtrace]" in line for line in said), said
    assert message.endswith(f"\nHint: {go_modules.CGO_HINT}"), message
