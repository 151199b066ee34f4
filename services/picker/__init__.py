"""The one picker core every integration mode runs: pool, scorers, force / shed hooks, stage picks.

- :mod:`.endpoints` — a pool's endpoints and their one syntax, ``[name=]host:port[@model]``;
- :mod:`.pool`, :mod:`.scraper` — health and load from each endpoint's ``/metrics``;
- :mod:`.request` — the request as a picker reads it (:mod:`.tokenizer` for token-aware scorers);
- :mod:`.scorers` — the scorer registry (``round-robin``, ``queue-scorer``, ``prefix-cache-scorer``,
  ``kv-router-scorer``), one module per type;
- :mod:`.core` — :class:`~.core.Picker`: shed, force, candidates, score, fallbacks, stages;
- :mod:`.stages` — prefiller and encoder picks of the disaggregated flows;
- :mod:`.decision` — the answer (:class:`~.decision.Decision`) or the refusal (:class:`~.decision.PickError`);
- :mod:`.headers` — every header a picker reads or writes;
- :mod:`.settings` — the settings, their defaults, and the flags that carry them.

Transports: ``eppkit.services.epp`` (Envoy ext_proc), ``eppkit.services.callout`` (HTTP ``/pick``
for the Lua and dynamic-module callouts), ``eppkit.services.frontend`` (the sidecar's routing query).
"""
