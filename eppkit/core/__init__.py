"""What every layer of the kit may use: where files live (package data, the cache, run folders), polling, /proc."""
