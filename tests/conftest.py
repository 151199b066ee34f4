"""This repository's tests use eppkit's pytest plugin (eppkit.pytest_plugin) as any project does.

The fixtures (eppkit_runtime, eppkit_jaeger, eppkit_testbed_factory, ...), the --eppkit-* options,
the CI rule for missing prerequisites and the session-end leak check all come from there;
pyproject.toml sets ``eppkit_runtime = "all"`` so every e2e test runs on both runtimes.
"""

import pytest
from eppkit.core import settings


@pytest.fixture(autouse=True)
def eppkit_settings_follow_the_tests_environment(monkeypatch):
    """The kit reads its ``EPPKIT_*`` settings once per process (eppkit.core.settings). A test starts from the
    environment as it is, and what it sets or unsets with ``monkeypatch.setenv`` / ``delenv`` is read again at once;
    after the test, its changes undone, the next one reads again."""
    settings.reread()
    for name in ("setenv", "delenv"):
        change = getattr(monkeypatch, name)

        def changed(*args, _change=change, **kwargs):
            _change(*args, **kwargs)
            settings.reread()

        setattr(monkeypatch, name, changed)  # this test's monkeypatch only (the instance, not the class)
    yield
