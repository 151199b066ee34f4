"""Headless Chromium (Debian's ``chromium``) for tests that look at a page as a browser renders it.

No driver library: Chromium's own ``--dump-dom`` prints the DOM after the page's script ran (with
``--virtual-time-budget`` the page's timers run to completion first) and ``--screenshot`` saves a
PNG. Each call runs one Chromium with a fresh profile that may reach 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from eppkit.pytest_plugin.state import require

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         # Chromium still calls Google's hosts despite the flags above; only loopback resolves.
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=5000")


def find() -> str | None:
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


def require_chromium() -> str:
    binary = find()
    require(binary is not None, "headless Chromium not found. Debian: apt-get install chromium")
    return binary


def _run(url: str, *flags: str, timeout_s: float = 90) -> str:
    binary = require_chromium()
    with tempfile.TemporaryDirectory(prefix="eppkit-chromium-") as profile:
        proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", *flags, url], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        finally:
            try:  # Chromium's helper processes share its group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return out


def dump_dom(url: str, width: int = 1400, height: int = 1600) -> str:
    """The page's DOM once its script has run (a page may draw only what fits its window)."""
    dom = _run(url, "--dump-dom", f"--window-size={width},{height}")
    assert "<html" in dom, f"Chromium printed no DOM for {url}"
    return dom


def screenshot(url: str, path: Path, width: int = 1400, height: int = 1600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    _run(url, f"--screenshot={path}", f"--window-size={width},{height}", "--hide-scrollbars")
    assert path.is_file() and path.stat().st_size > 10_000, f"no screenshot of {url}"
    return path
