"""Render Envoy bootstraps from envoy/<mode>.yaml.j2 and validate them with the real binary."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Mapping

import jinja2

from eppkit.paths import ENVOY_TEMPLATES

MODES = ("direct", "ext_proc", "sidecar", "lua-callout", "dynmod-callout")

# Envoy's bounds on a slow or short client, in seconds: the headers must be complete within
# request_headers_timeout_s of their first byte, the whole request within request_timeout_s (the
# HCM's request_headers_timeout / request_timeout; 0 turns one off). Past either, Envoy answers 408.
# Template variables with these defaults; topology options of the same names override them.
CLIENT_TIMEOUTS = {"request_headers_timeout_s": 10.0, "request_timeout_s": 60.0}


def client_timeouts(options: Mapping[str, Any]) -> dict[str, float]:
    """The client timeouts for a topology's ``options``: each option if set, else its default."""
    return {name: float(options.get(name, default)) for name, default in CLIENT_TIMEOUTS.items()}


def template_name(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return f"{mode.replace('-', '_')}.yaml.j2"


def render(mode: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ENVOY_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    defaults = {"trace_flush_interval_ms": 200, "trace_min_flush_spans": 5, "mode": mode, **CLIENT_TIMEOUTS}
    return env.get_template(template_name(mode)).render({**defaults, **variables})


def write(mode: str, variables: dict[str, Any], path: Path) -> Path:
    path.write_text(render(mode, variables))
    return path


class EnvoyConfigInvalid(RuntimeError):
    pass


def validate(envoy_binary: str, config_path: Path) -> None:
    """Run ``envoy --mode validate``; raise with Envoy's own message when it refuses the config."""
    proc = subprocess.run(
        [envoy_binary, "--mode", "validate", "-c", str(config_path), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        # Envoy puts the reason on the "error initializing configuration" line, then dumps the config.
        reason = next((line for line in output.splitlines() if "error initializing configuration" in line
                       or "Unable to parse" in line), output[-1500:])
        raise EnvoyConfigInvalid(f"envoy rejected {config_path}: {reason[:3000]}")
