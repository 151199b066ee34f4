"""The trace contract (:mod:`eppkit.observability.contract`) put to use: what a span does that the contract does
not declare (:func:`violations`, for the trace checks), and the contract as Markdown (docs/CONTRACTS.md:
``python -m eppkit.observability.contract_check --write docs/CONTRACTS.md``)."""

from __future__ import annotations

from typing import Iterable, Mapping

from eppkit.observability import contract

# -- checking spans against the contract ----------------------------------------------------------------

def violations(name: str, attributes: Iterable[str] = (), events: Mapping[str, Iterable[str]] | None = None,
               service: str | None = None) -> list[str]:
    """What one span does that the contract does not declare ([] when it conforms).

    ``events``: event name -> its attribute names. ``service``: its service.name, when known.
    Envoy's own spans are checked by name only: Envoy adds tags of its own (component, peer.address ...).
    """
    entry = contract.span(name)
    where = f"{service}:{name}" if service else name
    if entry is None:
        return [f"span {where!r} is not declared"]
    out = []
    if service is not None and service != entry.service:
        out.append(f"span {where!r} comes from {service!r}, declared for {entry.service!r}")
    if entry.origin == "Envoy":
        return out
    for key in attributes:
        if key not in entry.attributes:
            out.append(f"span {where!r}: attribute {key!r} is not declared for it")
    for event_name, event_attributes in (events or {}).items():
        if event_name not in entry.events and event_name != contract.ExceptionEvent.EVENT:
            out.append(f"span {where!r}: event {event_name!r} is not declared for it")
            continue
        declared = contract.entries(contract.EVENT)[event_name].attributes
        out += [f"span {where!r}: event {event_name!r} attribute {key!r} is not declared for it"
                for key in event_attributes if key not in declared]
    return out


# -- the reference (docs/CONTRACTS.md) ------------------------------------------------------------------

def markdown() -> str:
    """The trace contract as Markdown: docs/CONTRACTS.md holds exactly this between its markers."""
    attrs, events = contract.entries(contract.ATTRIBUTE), contract.entries(contract.EVENT)
    lines = ["Services (`service.name`): " + ", ".join(f"`{s}`" for s in contract.entries(contract.SERVICE)) + ".", ""]
    lines += ["| service | span | what it is | attributes | events |", "|---|---|---|---|---|"]
    for e in contract.entries(contract.SPAN).values():
        a = ", ".join(f"`{n}`" for n in e.attributes) or "–"
        ev = ", ".join(f"`{n}`" for n in e.events) or "–"
        origin = "" if e.origin == "eppkit" else f" ({e.origin}'s name)"
        lines.append(f"| {e.service} | `{e.name}` | {e.doc}{origin} | {a} | {ev} |")
    lines += ["", "| span event | what it is | attributes |", "|---|---|---|"]
    for e in events.values():
        lines.append(f"| `{e.name}` | {e.doc} | {', '.join(f'`{n}`' for n in e.attributes) or '–'} |")
    lines += ["", "| attribute | what it is | whose name |", "|---|---|---|"]
    for e in list(contract.entries(contract.RESOURCE).values()) + list(attrs.values()):
        kind = " (resource)" if e.kind == contract.RESOURCE else ""
        lines.append(f"| `{e.name}` | {e.doc}{kind} | {e.origin}{' semconv' if e.semconv else ''} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- trace contract: begin (generated from observability/contract.py) -->", "<!-- trace contract: end -->"


def render_into(text: str) -> str:
    """``text`` (docs/CONTRACTS.md) with the part between BEGIN and END replaced by :func:`markdown`."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} section")
    return f"{head}{BEGIN}\n{markdown()}{END}{tail}"


if __name__ == "__main__":  # python -m eppkit.observability.contract_check [--write docs/CONTRACTS.md]
    import sys
    from pathlib import Path

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        path.write_text(render_into(path.read_text()))
    else:
        print(markdown(), end="")
