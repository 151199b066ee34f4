"""Render Envoy bootstraps from the mode's template (envoy/*.yaml.j2) and validate them with the real binary."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import Any

import jinja2

from eppkit.paths import ENVOY_TEMPLATES
from eppkit.services.picker import headers


def client_timeouts(options: Any) -> dict[str, float]:
    """Template variables of Envoy's bounds on a slow client, from a mode's typed options
    (CommonOptions.request_headers_timeout_s / request_timeout_s, where their defaults live)."""
    return {"request_headers_timeout_s": float(options.request_headers_timeout_s),
            "request_timeout_s": float(options.request_timeout_s)}


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(str(value))
        return True
    except ValueError:
        return False


def render(mode: str, variables: dict[str, Any]) -> str:
    """The bootstrap of ``mode`` (its registry entry names the template) with ``variables``."""
    from eppkit import modes
    from eppkit.modes.options import CommonOptions

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ENVOY_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    # The picker core's header names (eppkit.services.picker.headers), named once, for every template and macro.
    env.globals["headers"] = headers
    env.tests["ip_address"] = _is_ip
    defaults = {"trace_flush_interval_ms": 200, "trace_min_flush_spans": 5, "mode": mode,
                **client_timeouts(CommonOptions())}
    return env.get_template(modes.get(mode).template).render({**defaults, **variables})


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
