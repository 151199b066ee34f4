"""How an option of the table (:mod:`eppkit.options`) is declared: the front ends that offer it (:data:`COMMANDS`,
:data:`PLUGIN`), its help group, an :class:`Option` with its one default and help text, the options a dataclass's
flagged fields make (:func:`from_fields`), and the value readers and argparse actions the table's entries use."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from eppkit.core.flags import flag_of, flagged
from eppkit.gateway import user_filters as uf
from eppkit.workload import concurrency_steps

UP, RUN, COMPARE, CONFORMANCE, BOOTSTRAP = "up", "run", "compare", "conformance", "bootstrap"
COMMANDS = (UP, RUN, COMPARE, CONFORMANCE, BOOTSTRAP)
PLUGIN = "plugin"  # the pytest plugin: --eppkit-<flag>
TESTBEDS = frozenset({UP, RUN, COMPARE, CONFORMANCE})  # the commands that start testbeds
PLUGIN_PREFIX = "eppkit"

# Help groups, in the order --help shows them.
GROUPS = {
    "testbed": "testbed",
    "backend": "backend (what serves inference behind the pickers)",
    "latency": "mock latency (every mock vLLM's knobs, milliseconds; llm-d-inference-sim gets them too, a real "
               "vLLM has its own)",
    "epp": "an EPP of your own (mode external-epp)",
    "plugin": "bring your own plugin (docs/bring-your-own-plugin.md)",
    "request": "the request",
    "workload": "workload",
    "picker": "picker",
    "report": "report",
    "conformance": "conformance",
    "pytest": "eppkit testbeds",
}


@dataclass(frozen=True)
class Option:
    flag: str  # "--mode"; the plugin's is "--eppkit-mode"
    help: str
    commands: frozenset[str]  # COMMANDS and PLUGIN that offer it
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: Callable[[], Sequence[str]] | None = None  # read when the parser is made (registries fill late)
    action: Any = None  # an argparse action ("append", "store_true", a class)
    const: Any = None
    metavar: str | None = None
    dest: str | None = None
    group: str = "testbed"
    ini: bool = False  # the plugin also reads the ini key eppkit_<dest> (the option, given, wins)
    short: str | None = None  # a one-letter flag as well ("-H")

    @property
    def name(self) -> str:
        """The attribute the parsed value lands on (argparse's dest)."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    @property
    def plugin_flag(self) -> str:
        return f"--{PLUGIN_PREFIX}-{self.flag.lstrip('-')}"


def from_fields(cls: type, commands: frozenset[str], group: str) -> list[Option]:
    """One option per :func:`~eppkit.core.flags.flag_field` of dataclass ``cls``: its flag, help and default as
    the field declares them, its type the default's."""
    return [Option(flag_of(f), f"{f.metadata['help']} (default: %(default)s)", commands, default=f.default,
                   type=type(f.default), metavar=f.metadata.get("metavar"), dest=f.name, group=group)
            for f in flagged(cls)]


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in fields(cls) if f.name == name)
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


def _names(value: str, known: Sequence[str], what: str, every: Sequence[str] | None = None) -> tuple[str, ...]:
    """A comma list of known names, or ``all`` (``every``, default all known)."""
    if value == "all":
        return tuple(known if every is None else every)
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [v for v in names if v not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(known)} or all")
    return names


def _sweep(value: str) -> tuple[int, ...]:
    try:
        return concurrency_steps(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- user filters on the command line (their order on it is their order in the chain) -----------------

class _AppendFilter(argparse.Action):
    """Appends a parsed filter to ``namespace.filters`` in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            flt = self.const(values)
        except ValueError as exc:
            parser.error(f"{option_string} {values}: {exc}")
        path = getattr(flt, "path", None) or getattr(flt, "snippet", None)
        if not Path(path).expanduser().exists():
            parser.error(f"{option_string} {values}: {path} does not exist (placement: PATH@before or PATH@after)")
        namespace.filters = [*(getattr(namespace, "filters", None) or []), flt]


class _ConfigOfLast(argparse.Action):
    """Sets ``config`` of the last filter of one kind (--lua-filter-config, --dynamic-module-config)."""

    def __call__(self, parser, namespace, values, option_string=None):
        kind = self.const
        last = next((f for f in reversed(getattr(namespace, "filters", None) or []) if isinstance(f, kind)), None)
        if last is None:
            flag = option_string.removesuffix("-config")
            parser.error(f"{option_string} configures the {flag} before it: give {flag} first")
        if kind is uf.LuaFilter:
            try:
                values = json.loads(values)
            except ValueError as exc:
                parser.error(f"{option_string}: not JSON ({exc})")
        last.config = values
