"""This repository's tests use eppkit's pytest plugin (eppkit.pytest_plugin) as any project does.

The fixtures (eppkit_runtime, eppkit_jaeger, eppkit_testbed_factory, ...), the --eppkit-* options,
the CI rule for missing prerequisites and the session-end leak check all come from there;
pyproject.toml sets ``eppkit_runtime = "all"`` so every e2e test runs on both runtimes.
"""
