"""A test that needs what a fresh machine lacks says how to get it: on a laptop it skips with that, in CI it fails
(eppkit.pytest_plugin.state.require). A fresh machine (bench/fresh_machine.py) has Python, Go and a C compiler,
and none of Debian's packages CI installs, nor any cache: README command 2 right after command 1 there must have
no failure. This reads every integration and e2e test module: one that touches such a prerequisite calls
``require`` itself or through a support module that does."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# What a fresh machine lacks, as the tests' code names it: a regular expression -> what it is.
HOST_PREREQUISITES = {
    r"podnet\.install_plugins|configs\.CNI_BIN": "Debian's CNI plugins (containernetworking-plugins)",
    r"zipkin\.(find_jar|ZipkinServer|start)": "Zipkin's server jar and Java (eppkit bootstrap --ui)",
    r"inference_perf\.(find|missing)": "inference-perf's venv (eppkit bootstrap --load-tool inference-perf)",
    r"LOAD_CLIENT\.build|FLOORS\.build": "Go, for the kit's own Go programs",
    r"versions\.cached\(|cached_binary\(": "Envoy releases cached (eppkit bootstrap --envoy-version ...)",
}
# Support modules that tell a missing prerequisite themselves (require): importing one counts.
TELLING_SUPPORT = ("tests.support.chromium", "tests.support.reliability")


def _tells(text: str) -> bool:
    return "require(" in text or any(module in text for module in TELLING_SUPPORT)


def test_every_test_that_needs_what_a_fresh_machine_lacks_says_how_to_get_it():
    untold = []
    for path in sorted([*TESTS.glob("integration/test_*.py"), *TESTS.glob("e2e/test_*.py")]):
        text = path.read_text()
        for pattern, what in HOST_PREREQUISITES.items():
            if re.search(pattern, text) and not _tells(text):
                untold.append(f"{path.relative_to(TESTS)}: needs {what} and never calls require()")
    assert untold == [], "\n".join(untold)


def test_the_cni_plugins_test_says_how_to_get_them():
    text = (TESTS / "integration" / "test_pod_network_ipam.py").read_text()
    assert "plugins_missing" in text and "require(" in text
