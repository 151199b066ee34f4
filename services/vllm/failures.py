"""Failure injection: which failure a request gets, by flag (rate) or by header.

A request header ``x-mock-failure`` forces one failure for that request only; otherwise
``--failure-injection-rate`` percent of requests get a failure drawn from
``--failure-types``. ``x-mock-failure: none`` switches injection off for one request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping

from eppkit.services.openai_server.flags import non_negative_int

# Canonical names (what the x-mock-failure header and --failure-types take).
SERVER_ERROR = "500"
RATE_LIMIT = "429"
CONTEXT_LENGTH = "context-length"
STALL = "stall"
DISCONNECT = "disconnect"
FAILURE_TYPES = (SERVER_ERROR, RATE_LIMIT, CONTEXT_LENGTH, STALL, DISCONNECT)

# llm-d-inference-sim's spellings, accepted too.
_ALIASES = {
    "server_error": SERVER_ERROR,
    "server-error": SERVER_ERROR,
    "rate_limit": RATE_LIMIT,
    "rate-limit": RATE_LIMIT,
    "context_length": CONTEXT_LENGTH,
    "context-length": CONTEXT_LENGTH,
}

HEADER_FAILURE = "x-mock-failure"
HEADER_AFTER_TOKENS = "x-mock-failure-after-tokens"


def normalize_failure_type(name: str) -> str:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FAILURE_TYPES:
        raise ValueError(f"unknown failure type {name!r}; known: {', '.join(FAILURE_TYPES)}")
    return key


@dataclass(frozen=True)
class Failure:
    kind: str  # one of FAILURE_TYPES
    after_tokens: int  # stall/disconnect: tokens written first (0: before the response headers)
    source: str  # "header" | "rate"


class FailureInjector:
    def __init__(self, rate_percent: float, types: list[str], after_tokens: int, seed: int) -> None:
        self.rate = rate_percent / 100.0
        self.types = [normalize_failure_type(t) for t in types] or list(FAILURE_TYPES)
        self.after_tokens = after_tokens
        self._rng = random.Random(f"failures:{seed}")

    def choose(self, headers: Mapping[str, str]) -> Failure | None:
        """The failure this request gets, or None. Raises ValueError on a bad header."""
        forced = headers.get(HEADER_FAILURE)
        after = self.after_tokens
        raw_after = headers.get(HEADER_AFTER_TOKENS)
        if raw_after is not None:
            after = non_negative_int(raw_after, HEADER_AFTER_TOKENS)
        if forced is not None:
            if forced.strip().lower() in ("", "none", "off"):
                return None
            return Failure(normalize_failure_type(forced), after, "header")
        if self.rate > 0 and self._rng.random() < self.rate:
            return Failure(self._rng.choice(self.types), after, "rate")
        return None
