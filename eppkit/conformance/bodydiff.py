"""A changed body, shown: how many of its bytes arrived, where the bytes the backend received first differ from the
client's, with context, and whether the JSON still says the same (every key, duplicate and value kept: only the
bytes changed, as a re-encoder that keeps values changes them) or says something else (a value lost or changed: a
body cut short, an integer above 2^53 read as a float, a float cut short, a duplicate key dropped, text altered).

Numbers are compared exactly (as decimals, and an integer stays an integer): ``9007199254740993`` read into a
float64 comes back as ``9007199254740992``, another value. Key order and spacing are not values; a duplicate key is
(a re-encoder keeps one of them). :func:`arrival` sorts a body that arrived as other bytes: re-encoded (every value
kept: only then), lost (data lost or changed on the way), or unread (nothing says which)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

CONTEXT = 24  # bytes shown on each side of the first difference
NOT_JSON = "what arrived is not JSON any more"
# How a body reached the backend (Arrival.kind).
SAME, REENCODED, LOST, UNREAD = "the same bytes", "re-encoded", "lost", "unread"


def first_difference(sent: bytes, got: bytes, context: int = CONTEXT) -> str:
    """Where ``got`` first differs from ``sent``: its offset and a few bytes either side of it in each."""
    at = next((i for i, (a, b) in enumerate(zip(sent, got)) if a != b), min(len(sent), len(got)))
    if at == len(sent) == len(got):
        return "the same bytes"
    ends = (", where what arrived ends" if at == len(got)
            else ", where the client's body ends" if at == len(sent) else "")

    def around(data: bytes) -> str:
        start = max(0, at - context)
        piece = data[start:at + context]
        return ("…" if start else "") + repr(piece)[2:-1] + ("…" if at + context < len(data) else "")

    return (f"first difference at byte {at:,}{ends} (sent {len(sent):,} B, received {len(got):,} B): "
            f"sent {around(sent)}; received {around(got)}")


def byte_counts(sent: int, got: int) -> str:
    """How many bytes arrived of how many the client sent."""
    return f"{got:,} of {sent:,} bytes arrived" if got <= sent else f"{got:,} bytes arrived for the {sent:,} sent"


@dataclass(frozen=True)
class Arrival:
    """How one body reached the backend."""

    kind: str  # SAME, REENCODED (other bytes, every value kept), LOST (values lost or changed), UNREAD (cannot tell)
    counts: str  # "N of M bytes arrived" ("": the backend said no length)
    how: str  # what became of its values
    where: str = ""  # the first difference ("": no copy of what arrived to compare)


def arrival(sent: bytes, got: bytes | None, *, got_bytes: int | None = None, status: int = 200,
            said: str = "") -> Arrival:
    """How ``sent`` reached the backend, from the backend's copy of what it received (``got``) or, without one, the
    length it reported (``got_bytes``) and its answer (``status``; ``said``: its error message). Data lost on the
    way (other bytes that are not the same JSON, another length, a body the backend answered with an error) is LOST;
    "re-encoded" only for bytes that read as the same values; UNREAD only for other bytes of the same length the
    backend served and did not show."""
    n = len(got) if got is not None else got_bytes
    counts = byte_counts(len(sent), n) if n is not None else ""
    refused = f"the backend answered HTTP {status}" if status >= 400 else ""
    if got is not None:
        if got == sent:
            return Arrival(SAME, counts, "the same bytes")
        kept, how = json_kept(sent, got)
        where = first_difference(sent, got)
        if kept:
            return Arrival(REENCODED, counts, how, where)
        how = ("other bytes, where the client sent no JSON" if kept is None
               else f"values lost: {how}" if how.startswith(NOT_JSON) else how)
        return Arrival(LOST, counts, "; ".join(filter(None, (how, refused))), where)
    unshown = "the backend's copy of it is not in its answer (x-mock-echo-body)"
    if (n is not None and n != len(sent)) or refused:
        refused += f" ({said})" if refused and said else ""
        return Arrival(LOST, counts, "; ".join(filter(None, (refused, f"{unshown}: no value can be shown kept"))))
    return Arrival(UNREAD, counts, f"other bytes, and {unshown}: its values could not be read")


def _exact(text: bytes) -> Any:
    """JSON read with every duplicate key kept (objects as sorted lists of pairs) and numbers exact."""
    def pairs(items: list[tuple[str, Any]]) -> tuple:
        return ("object", tuple(sorted(items, key=lambda kv: (kv[0], repr(kv[1])))))

    return json.loads(text, object_pairs_hook=pairs, parse_float=Decimal, parse_int=int)


def _values(value: Any, path: str = "$", out: dict[str, list] | None = None) -> dict[str, list]:
    """Every leaf of an exactly read JSON document by its path; a duplicate key's values under one path."""
    out = {} if out is None else out
    if isinstance(value, tuple) and value[:1] == ("object",):
        for key, item in value[1]:
            _values(item, f"{path}.{key}", out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _values(item, f"{path}[{i}]", out)
    else:
        out.setdefault(path, []).append(value)
    return out


def json_kept(sent: bytes, got: bytes) -> tuple[bool | None, str]:
    """(True, "...") when ``got`` is the same JSON as ``sent`` (every key, duplicate and value), (False, the values
    lost or changed: the first three) when it is not, (None, why) when the client's body is not JSON."""
    try:
        before = _exact(sent)
    except ValueError:
        return None, "the client's body is not JSON"
    try:
        after = _exact(got)
    except ValueError as exc:
        return False, f"{NOT_JSON} ({exc})"
    if before == after:
        return True, "the same JSON: every key, duplicate key and value kept; only the bytes (order, spacing, escapes)"
    was, now = _values(before), _values(after)
    changed = [f"{path} was {_show(was.get(path))}, arrived {_show(now.get(path))}"
               for path in list(was) + [p for p in now if p not in was] if was.get(path) != now.get(path)]
    if not changed:
        return False, "the JSON's structure changed"
    more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
    return False, f"{'a value' if len(changed) == 1 else 'values'} changed: " + "; ".join(changed[:3]) + more


def _show(values: list | None) -> str:
    """A leaf's values as JSON writes them (several: a duplicate key's)."""
    if values is None:
        return "missing"
    text = ", ".join(str(v) if isinstance(v, Decimal) else json.dumps(v, ensure_ascii=False) for v in values)
    text = text if len(values) == 1 else f"{len(values)} values: {text}"
    return text if len(text) <= 60 else text[:57] + "…"
