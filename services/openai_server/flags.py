"""The rules every mock's flags share: its served names, no negative numbers, jitter within 30% of its base."""

from __future__ import annotations

from dataclasses import fields

from eppkit.core.flags import flag_name

# Jitter may not exceed this fraction of its base (llm-d-inference-sim's rule).
MAX_JITTER_FRACTION = 0.3


class ConfigError(ValueError):
    """A flag value that cannot work; the message names the flag."""


def check_common(config) -> None:
    """A mock's served model names are given and none of its numeric flags is negative."""
    if not config.served_model_names or any(not n for n in config.served_model_names):
        raise ConfigError("--served-model-name cannot be empty")
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ConfigError(f"--{flag_name(f.name)} cannot be negative (got {value})")


def check_jitter(base_name: str, base: float, jitter_name: str, jitter: float) -> None:
    """``jitter`` (a standard deviation) stays within 30% of ``base``, or the flag is refused."""
    if jitter > MAX_JITTER_FRACTION * base + 1e-9:
        raise ConfigError(
            f"--{flag_name(jitter_name)} ({jitter}) cannot be more than 30% of "
            f"--{flag_name(base_name)} ({base})"
        )


def non_negative_int(raw: str, what: str) -> int:
    """``raw`` (a header's or a flag's text) as a count; a ValueError naming ``what`` when it is not one."""
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{what} is not a number: {raw!r}") from None
    if value < 0:
        raise ValueError(f"{what} cannot be negative: {value}")
    return value
