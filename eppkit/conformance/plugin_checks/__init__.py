"""A plugin's checks (``eppkit conformance --plugin``): your Lua filter, dynamic module or HTTP filter judged as the
subject, each check one function with one decorator (:func:`eppkit.conformance.registry.check`: a check of this
package judges a plugin, in a registry of its own, :data:`~eppkit.conformance.registry.PLUGIN_CHECKS`), so no EPP check
runs on a plugin and no plugin check on an EPP.

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

# The order the report lists the modules' checks in (each module's in the order it declares them). How they run is
# the scheduler's, from what each check declares: no-script-errors and no-module-errors audit (they read the errors
# counter and Envoy's log over every request the verdict sent before them: after every check of ordinary traffic);
# hostile-input-survives and streams-served may take Envoy down (after every other, so that no check counts their
# errors and none goes down with them).
ORDER = ("streaming", "bodies", "refusals", "cost", "memory", "script_errors", "module_errors", "hostile", "streams")

load_members(__name__, __path__, group="plugin_checks", skip=("floor", "alive"), order=ORDER)
