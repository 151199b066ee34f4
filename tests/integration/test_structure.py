"""The structure as a user meets it: the checkout's folders cannot be imported by their bare names, no stale
module name remains in code or docs, and the wheel installs, imports and runs outside the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.imports import ROOT

pytestmark = pytest.mark.integration


def test_a_checkout_folder_imported_by_its_bare_name_names_the_right_import():
    for folder in ("services", "observability"):
        proc = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode != 0
        assert f"import eppkit.{folder}, not {folder}" in proc.stderr


# Names of modules and folders the kit once had and has no more. No code or doc may use them.
_GONE = ("paths|polling|procfs|local|docker_runtime|containers|images|launchers|process|readiness|jaeger|"
         "envoy_config|envoy_process|envoy_versions|user_filters|body_routing|dynmod_build|gaie_build|gotools|"
         "python_deps|bootstrap|doctor|live_ui|zipkin|trace_feed|inference_sim|component")
STALE = (
    re.compile(r"(?<![\w./\-])testbed[./][a-z_]"),  # the folder testbed/ is eppkit/ (eppkit/runtimes/testbed.py is not it)
    re.compile(r"python -m (services|observability|testbed)\b"),  # the services run as python -m eppkit.services.<x>
    re.compile(r"^\s*(from|import) (services|observability|testbed)\b", re.M),
    re.compile(r"\beppkit\.(" + _GONE + r")\b(?![\"'])"),  # (a docker label such as "eppkit.component" is no module)
    re.compile(r"observability[./]report\b"),
)
# A test that builds a user project with its own `services`, `testbed` and `observability` packages.
STALE_ALLOWED = {"tests/unit/test_layers.py", "tests/integration/test_user_packages.py"}


def test_no_stale_module_name_remains_in_code_or_docs():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if name in STALE_ALLOWED or path.suffix in (".png", ".json", ".sum") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in STALE):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert found == []


# Every module of the distribution, imported in the installed kit (a script run by the outside venv's Python).
IMPORT_ALL = textwrap.dedent("""
    import importlib, importlib.util, pkgutil, sys
    import eppkit
    names = ["eppkit"]
    for package in ("eppkit", "eppkit.services", "eppkit.observability"):
        module = importlib.import_module(package)
        names += [package] + [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]
    failed = []
    for name in sorted(set(names)):
        if name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    services = sorted(m.name for m in pkgutil.iter_modules(importlib.import_module("eppkit.services").__path__)
                      if m.ispkg and importlib.util.find_spec(f"eppkit.services.{m.name}.__main__"))
    print("SERVICES", " ".join(services))
    print("IMPORTED", len(set(names)))
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
""")


def _run(argv, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


# A virtualenv the kit was installed into outside the checkout already (.ci/run's outside project: pip install of the
# checkout, then `eppkit bootstrap`): the test judges that install instead of making one more of its own.
OUTSIDE_VENV = "EPPKIT_OUTSIDE_VENV"


def _installed(tmp_path, outside) -> Path:
    """A virtualenv with the kit's wheel installed outside the checkout: $EPPKIT_OUTSIDE_VENV's, or one made now."""
    if os.environ.get(OUTSIDE_VENV):
        return Path(os.environ[OUTSIDE_VENV])
    wheels, venv, source = tmp_path / "wheels", tmp_path / "venv", tmp_path / "source"
    # Built from a copy of the checkout's files (tracked, or new and not ignored): setuptools keeps a build/
    # folder in the tree it builds, and a stale one would put deleted files into the wheel.
    files = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, source])
    (wheel,) = wheels.glob("eppkit-*.whl")
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel])
    # The xds-protos / opentelemetry-proto clash that `eppkit bootstrap` repairs first.
    _run([python, "-c", "from eppkit.builds.python_deps import repair_otel_protos; repair_otel_protos()"], cwd=outside)
    return venv


def test_the_wheel_installs_outside_the_checkout_and_every_module_and_service_works(tmp_path):
    """What a new user gets from `pip install <checkout>`: every module imports (the package list is found,
    not written by hand), every service answers --help, the CLI runs, and nothing but eppkit is importable."""
    outside = tmp_path / "project"
    outside.mkdir()
    venv = _installed(tmp_path, outside)
    python = venv / "bin" / "python"
    imported = _run([python, "-c", IMPORT_ALL], cwd=outside).stdout
    services = imported.split("SERVICES", 1)[1].splitlines()[0].split()
    assert {"epp", "vllm", "encoder", "callout", "frontend", "pd_sidecar"} <= set(services)
    assert int(imported.split("IMPORTED", 1)[1].split()[0]) > 100
    for service in services:
        out = _run([python, "-m", f"eppkit.services.{service}", "--help"], cwd=outside).stdout
        assert "usage:" in out, service
    # Package data a module reads by its own path (not through importlib.resources): the vllm preset's pins.
    _run([python, "-c", "from eppkit.builds import vllm_cpu; assert vllm_cpu.CONSTRAINTS.is_file(), vllm_cpu.CONSTRAINTS"],
         cwd=outside)
    for command in ("up", "run", "compare", "bootstrap", "doctor"):
        assert "usage:" in _run([venv / "bin" / "eppkit", command, "--help"], cwd=outside).stdout
    for bare in ("services", "observability", "testbed"):
        assert subprocess.run([python, "-c", f"import {bare}"], cwd=outside, capture_output=True).returncode != 0
