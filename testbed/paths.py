"""Where the kit's files live: the checkout, the per-user cache, run folders."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ENVOY_TEMPLATES = REPO_ROOT / "envoy"
PLUGINS = REPO_ROOT / "plugins"


def cache_dir() -> Path:
    """Built artifacts (Jaeger binary, dynamic module) live here, outside the repo, and are reused."""
    base = os.environ.get("EPPKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "eppkit"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir() -> Path:
    """Each testbed start gets a folder here holding its rendered configs and logs."""
    path = Path(os.environ.get("EPPKIT_RUNS") or (REPO_ROOT / "runs"))
    path.mkdir(parents=True, exist_ok=True)
    return path
