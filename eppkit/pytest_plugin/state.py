"""What the plugin's parts share: whether this is CI, the stash keys, the session tag, how a missing prerequisite is told."""

from __future__ import annotations

import os
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Every process a session starts carries this variable (ManagedProcess passes os.environ on, and
# children inherit it, including what a CLI run as a subprocess starts); the leak check finds
# them by it in /proc, whether or not any registry knows them.
SESSION_TAG = "EPPKIT_TEST_SESSION"
BEDS = pytest.StashKey[list]()  # item -> the testbeds its test used
TRACE_MARKS = pytest.StashKey[dict]()  # id(testbed) -> how many requests it had served before the test
UI = pytest.StashKey[Any]()  # config -> the live trace UI (--eppkit-ui)


def require(condition: bool, reason: str) -> None:
    """Skip (laptop) or fail (CI=true) when a prerequisite is missing; ``reason`` says how to get it."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)
