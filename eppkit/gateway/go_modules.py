"""Go dynamic modules in Envoy: the cgo pointer check they need off, and Go's own words when one aborts Envoy.

The Envoy Go SDK hands Envoy Go pointers by design, which Go's cgo pointer check (``cgocheck``, on by default)
refuses: a module built as its own docs and Envoy's build it (plain ``go build -buildmode=c-shared``) aborts Envoy
at its first filter config with a Go panic in ``runtime.cgoCheckArg``. Envoy's docs run Envoy with
``GODEBUG=cgocheck=0``; so does the kit, whenever Envoy's config loads a dynamic module (:func:`envoy_env`): the
testbed's Envoy on every runtime (eppkit.gateway.process.Envoy) and every ``envoy --mode validate``
(eppkit.gateway.config.validate). The kit's own module also has it as its built-in default
(eppkit.builds.dynmod's LDFLAGS), so it loads in an Envoy someone else runs.

Set for any dynamic module, not only for one detected as Go (the ELF's Go build info): GODEBUG is read by a Go
runtime alone, so a Rust or C module is not changed by it, while a detection would miss a module it cannot read (a
Go module linked into a C wrapper, one stripped of its build info, one Envoy finds by name on
ENVOY_DYNAMIC_MODULES_SEARCH_PATH) and leave exactly that module aborting Envoy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from eppkit.builds.dynmod import CGOCHECK_OFF

GODEBUG = "GODEBUG"
CGOCHECK = CGOCHECK_OFF.split("=")[0]  # (the setting is defined once, where the kit's module's default is built)
MODULE_KEY = "dynamic_module_config"  # what every dynamic-modules extension's config holds (its module)

# Go's words for its cgo pointer check (the frames runtime.cgoCheckArg / cgoCheckResult; "cgo argument has Go
# pointer to unpinned Go pointer", "... is unpinned Go unsafe pointer or points to unpinned Go unsafe pointer").
CGO_CHECK_WORDS = ("cgoCheck", "unpinned Go")
CGO_HINT = (f"Go's cgo pointer check aborted Envoy: the Envoy Go SDK hands Envoy Go pointers by design, and Envoy's "
            f"docs run Go modules with {GODEBUG}={CGOCHECK_OFF}. eppkit sets that for Envoy unless {GODEBUG} "
            f"already sets {CGOCHECK}: remove {CGOCHECK} from your {GODEBUG} (or build the module with "
            f"-ldflags=-X=runtime.godebugDefault={CGOCHECK_OFF})")

# Where Go's runtime starts its last words (at the start of a line, without Envoy's log prefix).
_GO_DEATH = re.compile(r"^(panic: |fatal error: )")


def modules(config: Any) -> list[str]:
    """Each dynamic module ``config`` (a bootstrap, or any part of one, as parsed YAML/JSON) loads: its file (or
    name) and filter name."""
    found: list[str] = []
    if isinstance(config, dict):
        module = config.get(MODULE_KEY)
        if isinstance(module, dict):
            local = (module.get("module") or {}).get("local") or {}
            what = local.get("filename") or module.get("name") or "?"
            found.append(f"{what} (filter {config['filter_name']})" if config.get("filter_name") else str(what))
        for value in config.values():
            found += modules(value)
    elif isinstance(config, list):
        for value in config:
            found += modules(value)
    return found


def read(config_path: str | Path) -> Any:
    """A bootstrap file (YAML or JSON) parsed; None when it cannot be read (Envoy will say why)."""
    try:
        return yaml.safe_load(Path(config_path).read_text())
    except (OSError, yaml.YAMLError):
        return None


def godebug(current: str | None) -> str:
    """``current`` GODEBUG with cgocheck=0 added; every other setting kept. A cgocheck it already sets is kept: that
    is someone's choice (Go's check finds real pointer bugs in a module), and a refusal's hint then says so."""
    settings = [s for s in (current or "").split(",") if s.strip()]
    if any(s.split("=", 1)[0].strip() == CGOCHECK for s in settings):
        return ",".join(settings)
    return ",".join([*settings, CGOCHECK_OFF])


def envoy_env(config: Any, env: Mapping[str, str] | None = None,
              inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """Envoy's extra environment ``env`` with GODEBUG merged (:func:`godebug`) when ``config`` loads a dynamic
    module; else ``env`` as it is. The GODEBUG merged into is ``env``'s, else ``inherited``'s (this process's, which
    a local Envoy inherits: the same settings on every runtime)."""
    env = dict(env or {})
    if modules(config):
        inherited = os.environ if inherited is None else inherited
        env[GODEBUG] = godebug(env.get(GODEBUG, inherited.get(GODEBUG)))
    return env


def go_panic(output: str, frames: int = 3) -> list[str]:
    """Go's own words when a Go runtime ended the process: its ``panic:`` (or ``fatal error:``) line, then the first
    ``frames`` frames of the goroutine that panicked (``function at file:line``); [] when Go said nothing."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if _GO_DEATH.match(line)), None)
    if start is None:
        return []
    said = [lines[start].strip()[:500]]
    rest = lines[start + 1:]
    for i, line in enumerate(rest):
        if len(said) > frames:
            break
        if line.startswith(("\t", " ", "[", "goroutine ")) or not line.rstrip().endswith(")"):
            continue
        function = line.rsplit("(", 1)[0]
        if function == "panic":
            continue
        where = rest[i + 1].strip().split(" +0x")[0] if i + 1 < len(rest) and rest[i + 1].startswith("\t") else ""
        said.append(f"at {function}" + (f" ({where})" if where else ""))
    return said


def hint(words: str) -> str:
    """What to do about Go's ``words``: the cgocheck fix where they are its pointer check, else ''."""
    return CGO_HINT if any(w in words for w in CGO_CHECK_WORDS) else ""


def aborted(log: str, config: Any) -> str | None:
    """When Envoy's ``log`` ends in a Go panic and ``config`` loads dynamic modules: which, Go's words and the hint;
    else None."""
    said, loaded = go_panic(log), modules(config)
    if not said or not loaded:
        return None
    fix = hint("\n".join(said))
    return (f"Envoy aborted as it loaded its dynamic modules ({'; '.join(loaded)}): a Go module panicked. Go says:\n"
            + "\n".join(f"  {line}" for line in said) + (f"\nHint: {fix}" if fix else ""))
