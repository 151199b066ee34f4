"""Dataclass fields that are command-line options too: a knob's default, help and flag declared once, on the
dataclass that consumes it. The front ends (``eppkit.options``, a mock's own parser) make their flags from these
fields; nothing else writes the default or the help again."""

from __future__ import annotations

from dataclasses import Field, field, fields
from typing import Any


def flag_field(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None, **meta: Any) -> Any:
    """A field of ``default`` whose option is ``flag`` (default: ``--<name with dashes>``) with ``help``;
    ``meta`` holds what else its consumer reads (a latency knob's ``jitter_of``)."""
    return field(default=default, metadata={"help": help, "flag": flag, "metavar": metavar, **meta})


def flag_name(attr: str) -> str:
    """The command-line flag of a config attribute, without its dashes: ``max_num_seqs`` -> ``max-num-seqs``."""
    return attr.replace("_", "-")


def flag_of(f: Field) -> str:
    """The flag of a :func:`flag_field`: the one it names, or ``--<its name with dashes>``."""
    return f.metadata.get("flag") or f"--{flag_name(f.name)}"


def flagged(cls: type) -> list[Field]:
    """The fields of dataclass ``cls`` declared with :func:`flag_field`, in their order."""
    return [f for f in fields(cls) if "help" in f.metadata]
