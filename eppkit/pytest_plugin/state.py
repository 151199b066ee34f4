"""What the plugin's parts share: whether this is CI, the stash keys, the session tag, how a missing prerequisite is told."""

from __future__ import annotations

import os
from typing import Any

import pytest

from eppkit.core.procfs import SESSION_TAG  # noqa: F401  (the session's tag: its processes carry it)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BEDS = pytest.StashKey[list]()  # item -> the testbeds its test used
TRACE_MARKS = pytest.StashKey[dict]()  # id(testbed) -> how many requests it had served before the test
UI = pytest.StashKey[Any]()  # config -> the live trace UI (--eppkit-ui)
CLUSTER = pytest.StashKey[Any]()  # config -> the cluster --eppkit-kubeconfig names (eppkit.cluster.handle), if one
RUNTIMES = pytest.StashKey[tuple]()  # config -> the runtimes --eppkit-runtime (or the ini key) names, read once


def require(condition: bool, reason: str) -> None:
    """Skip (laptop) or fail (CI=true) when a prerequisite is missing; ``reason`` says how to get it."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)
