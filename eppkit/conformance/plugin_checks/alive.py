"""Whether the plugin's Envoy is up as it was, and its last words when it is not.

Up: its admin ``/ready`` answers LIVE and its ``server.uptime`` did not go back (the kit runs Envoy with
``--disable-hot-restart``, so a restart shows only there). A panic in a Go dynamic module ends Envoy's whole process
(the SDK recovers nothing); Go writes the panic to Envoy's stderr, without Envoy's log prefix, and that is what the
verdict quotes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness

# Where a process's end begins in Envoy's log: a Go panic (a dynamic module's), Go's fatal error, Envoy's own crash
# handler's backtrace, a critical line.
ENDINGS = ("panic:", "fatal error:", "Caught ", "][critical][")
LAST_WORDS = 4  # lines of it quoted: the panic's message and where it was


def envoy_up(h: PluginHarness, bed) -> tuple[bool, float]:
    """Envoy's admin /ready answers LIVE; its server.uptime (s; -1 when the admin does not answer)."""
    try:
        ready = requests.get(f"{bed.envoy_admin_url}/ready", timeout=5)
        live = ready.status_code == 200 and ready.text.strip() == "LIVE"
        return live, h.stats(bed, "server.uptime").get("server.uptime", -1)
    except requests.RequestException:
        return False, -1


def last_words(bed) -> list[str]:
    """What Envoy's process wrote as it ended (from the first line of :data:`ENDINGS` on: the panic, its goroutine,
    the frame in your code), or nothing."""
    proc = bed.processes().get("envoy")
    lines = proc.read_log().splitlines() if proc is not None else []
    start = next((i for i, line in enumerate(lines) if any(mark in line for mark in ENDINGS)), None)
    if start is None:
        return []
    said = [line.strip()[:300] for line in lines[start:] if line.strip() and not line.startswith("[signal")]
    frames = [line for line in said[1:] if ".go:" in line or "(" in line]
    return said[:1] + frames[:LAST_WORDS - 1]


def gone(h: PluginHarness, bed, uptime_before: float) -> str | None:
    """How Envoy is not up as it was (None: it is), in its own words where it left any."""
    live, uptime = envoy_up(h, bed)
    if live and uptime >= uptime_before:
        return None
    how = ("its admin does not answer" if uptime < 0 else "/ready not LIVE" if not live else
           "server.uptime went back: it restarted")
    words = last_words(bed)
    return f"Envoy is not up as it was ({how})" + (f"; its last words: {' | '.join(words)}" if words else "")
