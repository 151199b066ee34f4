"""``python -m eppkit.options``: the plugin's option table for docs/api.md."""

from eppkit.options import plugin_table

print(plugin_table())
