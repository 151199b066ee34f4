"""The plugin's side of the options table (eppkit.options): ``--eppkit-<flag>`` and ``eppkit_<dest>`` ini keys on
pytest's parser, and their values read back under the table's names."""

from __future__ import annotations

from typing import Any

from eppkit.options import GROUPS, PLUGIN, PLUGIN_PREFIX, argparse_kwargs, options_for


def add_pytest_options(parser) -> None:
    """The plugin's options on pytest's parser: ``--eppkit-<flag>``, and ``eppkit_<dest>`` ini keys."""
    group = parser.getgroup(PLUGIN_PREFIX, GROUPS["pytest"])
    for option in options_for(PLUGIN):
        kw = argparse_kwargs(option)
        if option.ini or option.action is None and option.default not in (None, [], ""):
            kw["default"] = None  # None: not given, so the ini key (or the table's default) applies
        group.addoption(option.plugin_flag, **kw)
        if option.ini:
            parser.addini(f"{PLUGIN_PREFIX}_{option.name}", f"default for {option.plugin_flag}",
                          default="" if option.default is None else str(option.default))


class PluginValues:
    """The plugin's option values under their table names (``values.backend``), as argparse would give them: an ini
    key's text (or the table's default, when it is text) read by the option's ``type`` as a flag's would be."""

    def __init__(self, config) -> None:
        self._config = config

    def __getattr__(self, name: str) -> Any:
        option = next((o for o in options_for(PLUGIN) if o.name == name), None)
        if option is None:
            raise AttributeError(f"no plugin option {name!r}")
        value = self._config.getoption(option.plugin_flag)
        if value is None and option.ini:
            value = self._config.getini(f"{PLUGIN_PREFIX}_{option.name}") or None
        value = option.default if value is None else value
        return option.type(value) if isinstance(value, str) and option.type is not None else value
