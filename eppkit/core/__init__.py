"""What every layer of the kit may use: its settings (every ``EPPKIT_*`` variable, read once), where files live
(package data, the cache, run folders), polling, /proc."""
