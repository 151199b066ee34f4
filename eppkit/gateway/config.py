"""Render Envoy bootstraps from the mode's template (envoy/*.yaml.j2) and validate them with the real binary."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import yaml

from eppkit.core.paths import ENVOY_TEMPLATES
from eppkit.gateway import go_modules
from eppkit.gateway import process as envoy_process
from eppkit.gateway.versions import EnvoyBinary, check_features
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


def render(template: str, variables: dict[str, Any]) -> str:
    """The bootstrap ``template`` (a mode's: eppkit.modes.Mode.template) rendered with ``variables``.

    Every variable the template uses must be given (StrictUndefined), the client timeouts
    (:func:`client_timeouts` of the mode's options) included."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ENVOY_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    # The picker core's header names (eppkit.services.picker.headers), named once, for every template and macro.
    env.globals["headers"] = headers
    env.tests["ip_address"] = _is_ip
    defaults = {"trace_flush_interval_ms": 200, "trace_min_flush_spans": 5,
                # A user's own filters around the mode's (eppkit.gateway.user_filters.template_vars).
                "user_filters_before": [], "user_filters_after": []}
    return env.get_template(template).render({**defaults, **variables})


def write(template: str, variables: dict[str, Any], path: Path) -> Path:
    path.write_text(render(template, variables))
    return path


class EnvoyConfigInvalid(RuntimeError):
    def __init__(self, message: str, envoy_says: str = ""):
        super().__init__(message)
        self.envoy_says = envoy_says  # Envoy's own lines about why (see envoy_messages)


_LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:.]+\]\[\d+\]")


def envoy_messages(output: str) -> str:
    """Envoy's lines that say why it refused a config: critical and error lines, and the warnings of
    dynamic modules (a module's own refusal comes as one), without the timestamp and thread id.
    Runs of spaces are collapsed: Envoy's protobuf errors put random extra spaces into their text.
    A Go module's panic is said in Go's words (its ``panic:`` line and first frames), in place of Envoy's
    backtrace of the abort that followed it."""
    go_said = go_modules.go_panic(output)
    lines = []
    for line in output.splitlines():
        if go_said and "][backtrace]" in line:
            continue
        if "][critical][" in line or "][error][" in line or "][warning][dynamic_modules]" in line:
            lines.append(re.sub(r" {2,}", " ", _LOG_PREFIX.sub("", line)).strip())
    return "\n".join(lines + go_said)


def validate(envoy: EnvoyBinary | str | Path, config_path: Path, what: str | None = None,
             env: dict[str, str] | None = None) -> None:
    """Run ``envoy --mode validate``; raise with Envoy's own message when it refuses the config.

    Given an :class:`EnvoyBinary` (whose version is known), a feature that version lacks is
    refused first with the feature's name and the first version that has it
    (:class:`eppkit.gateway.versions.EnvoyFeatureMissing`). ``env``: what Envoy's environment adds
    to this process's, as the Envoy that will run the config gets it; a config that loads a dynamic
    module gets the GODEBUG a Go module needs, as that Envoy does (eppkit.gateway.go_modules).
    """
    if isinstance(envoy, EnvoyBinary):
        check_features(yaml.safe_load(Path(config_path).read_text()), envoy,
                       what=what or f"the rendered config {config_path}")
        binary = str(envoy.path)
    else:
        binary = str(envoy)
    proc = subprocess.run(
        [binary, "--mode", "validate", "-c", str(config_path), "--log-level", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **go_modules.envoy_env(go_modules.read(config_path), env)},
    )
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        why = envoy_process.cannot_watch(output)
        if why is not None:  # not the config's fault: the machine's
            raise envoy_process.EnvoyCannotWatch(why)
        # Envoy puts the reason on the "error initializing configuration" line, then dumps the config;
        # an assertion says its own on a "critical" line before the backtrace.
        reason = next(iter(go_modules.go_panic(output)), None) or next(
            (line for line in output.splitlines() if "error initializing configuration" in line
             or "Unable to parse" in line or "assert failure" in line), output[-1500:])
        raise EnvoyConfigInvalid(f"envoy rejected {config_path}: {reason[:3000]}", envoy_messages(output) or reason)


def check_filters(entries: list[dict], envoy: EnvoyBinary, config_path: Path, what: str = "these filters",
                  env: dict[str, str] | None = None) -> None:
    """Validate HTTP filter entries alone, in a bootstrap of one listener with them and the router.

    ``envoy --mode validate`` builds every filter's config: it compiles Lua and loads a dynamic
    module (dlopen, its ABI check, its filter config constructor), so this catches what would
    otherwise only fail the real start. Nothing binds; it takes about 0.2 s.
    """
    check_features(entries, envoy, what=what)
    router = {"name": "envoy.filters.http.router",
              "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    bootstrap = {"static_resources": {"listeners": [{
        "name": "filter_check",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "filter_check",
                "http_filters": [*entries, router],
                "route_config": {"virtual_hosts": [{"name": "any", "domains": ["*"], "routes": [
                    {"match": {"prefix": "/"}, "direct_response": {"status": 200}}]}]},
            },
        }]}],
    }]}}
    Path(config_path).write_text(json.dumps(bootstrap, indent=1, ensure_ascii=False) + "\n")
    validate(envoy.path, config_path, env=env)
