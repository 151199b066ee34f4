"""A plugin's checks (``eppkit conformance --plugin``): your Lua filter, dynamic module or HTTP filter judged as the
subject, each check in the registry of its own (:data:`eppkit.conformance.checks.registry.PLUGIN_CHECKS`), so no
EPP check runs on a plugin and no plugin check on an EPP.

Every check sends the same requests through the plugin's testbed and through its floor (:mod:`.floor`: the same
topology without the plugin's filters, started once per verdict) and judges the difference, on HTTP/1.1 and h2c.
The witness rules are the EPP verdict's (:mod:`eppkit.conformance.witness`): a check passes only on requests that
were served as it intended, on both testbeds.
"""

from __future__ import annotations

from eppkit.conformance.plugin_checks.floor import RULE
from eppkit.core.registry import load_members

# What the report says the floor was and how a figure is held to it.
FLOOR = {"testbed": "the same topology without the plugin's filters, started beside it in the same run",
         "rule": RULE}

# The order they run in: no-script-errors and no-module-errors after every check of ordinary traffic, as they read
# the errors counter and Envoy's log over every request the verdict sent before them; hostile-input-survives after
# them, its hostile requests' errors its own (each counted around the request that raised it), so that no check
# counts another's; streams-served last, as a plugin that cannot survive a cancelled stream takes Envoy down with it.
ORDER = ("streaming", "bodies", "refusals", "cost", "memory", "script_errors", "module_errors", "hostile", "streams")

load_members(__name__, __path__, group="plugin_checks", skip=("floor", "alive"), order=ORDER)
