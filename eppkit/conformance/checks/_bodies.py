"""The bodies the body checks send (body-values-kept, bodies-byte-for-byte, trailers-body-once): what a JSON
re-encoder loses or changes, at sizes from empty to well past a chunk; one round of them through the EPP, and how
each reached the backend (from the mock's echo of what it received)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eppkit.conformance import bodydiff
from eppkit.conformance.witness import Sent, served
from eppkit.services.pod_headers import HEADER_ECHO_BODY, RECEIVED_BODY_FIELD

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness


# Sizes the bodies are checked at: empty, one small chunk, and well past one chunk (1.2 MB of JSON goes to the
# EPP in many messages when the client writes it in pieces; written at once, Envoy may hand it over in one).
BODY_SIZES = (0, 200, 1_200_000)
PIECES = 20  # the largest body also written in this many paced pieces: many messages to the EPP
SIZES = f"{BODY_SIZES[0]} B, {BODY_SIZES[1]} B and {BODY_SIZES[2] / 1e6:g} MB"  # as the rules say them


def body(size: int, model: str) -> bytes:
    """A chat request of about ``size`` bytes, written as a client might (indentation, keys in its order) and
    holding what a re-encoder of the JSON loses or changes: an integer above 2^53, a float of 17 significant
    digits, a duplicate key (the last one counts), non-ASCII text and ``\\u`` escapes."""
    if size == 0:
        return b""
    head = ('{\n  "model": %s,\n  "seed": 9007199254740993,\n  "temperature": 0.12345678901234567,\n'
            '  "max_tokens": 2,\n  "max_tokens": 1,\n  "messages": [\n    {"role": "user", "content": '
            '"h\\u00e9llo, caf\u00e9 \u4e16\u754c \\ud83d\\ude00 %s"}\n  ]\n}' % (json.dumps(model), "{filler}"))
    filler = "x" * max(1, size - len(head.replace("{filler}", "").encode()))  # one long word: one token to the mock
    return head.replace("{filler}", filler).encode()


@dataclass
class Bodies:
    """The bodies of one round (bodies_sent): those the backend was sent, as (label, the client's bytes, the
    request); evidence of those the EPP refused itself (its own 4xx: not judged); those neither refused nor
    served (no answer in time, a reset), with the cause in Envoy's words."""

    arrived: list[tuple[str, bytes, Sent]] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    unserved: list[tuple[str, Sent]] = field(default_factory=list)

    def witnessed(self, h: EppHarness) -> None:
        """Raise NotWitnessed (the check not run) for the first body neither refused nor served: called when what
        did arrive shows nothing wrong, so that no pass is given on a round some of whose bodies never came."""
        for label, sent in self.unserved:
            h.must_serve(sent, f"a {label} body", status=sent.result.status or 200)

    def also_unserved(self, h: EppHarness) -> str:
        """The bodies that were not served, said beside a failure that others already witnessed."""
        return "".join(f" (also: the {label} body was not served: {h.cause(sent)})" for label, sent in self.unserved)


def bodies_sent(h: EppHarness) -> Bodies:
    """Bodies of 0 B, 200 B and 1.2 MB (written whole, and in 20 paced pieces: many messages to the EPP) sent
    through the EPP, the mock asked to echo what it received. Each body that reached the backend is judged by
    itself: one that never came back does not hide another's lost values (the failure stands on those), but a
    check passes only when every body came back (Bodies.witnessed)."""
    bed = h.bed()
    forms = [(size, 1) for size in BODY_SIZES] + [(BODY_SIZES[-1], PIECES)]
    bodies = [body(size, bed.backends[0].model) for size, _ in forms]
    sents = h.send_all(bed, [{"raw_body": data, "pieces": pieces, "pause_s": 0.01 if pieces > 1 else 0.0,
                              "headers": {HEADER_ECHO_BODY: "1"}}
                             for data, (_, pieces) in zip(bodies, forms)])
    out = Bodies()
    for (size, pieces), data, sent in zip(forms, bodies, sents):
        result, hop = sent.result, sent.hop
        got = h.body_digest(result)
        label = f"{size:,} B" + (f" in {pieces} pieces" if pieces > 1 else "")
        if got is None and hop is not None and str(hop["details"] or "").startswith("epp_") or (
                got is None and 400 <= result.status < 500 and h.served_by(result) is None):
            out.evidence.append(f"{label}: the EPP refused it itself (HTTP {result.status}): not judged")
            continue
        if got is None and not served(Sent(result, hop, h.protocol), status=result.status or 200):
            out.unserved.append((label, Sent(result, hop, h.protocol)))
            continue
        out.arrived.append((label, data, sent))
    return out


def how_it_arrived(h: EppHarness, label: str, data: bytes, sent: Sent, evidence: list[str]) -> bodydiff.Arrival:
    """How ``data`` reached the backend (eppkit.conformance.bodydiff.arrival), from the mock's answer: its digest,
    length and copy of what it received, its status; said in ``evidence``."""
    result = sent.result
    got, length = h.body_digest(result), h.body_length(result)
    evidence.append(f"{label}: client sent {len(data):,} B, sha256 {h.digest(data)[:16]}…; backend received "
                    + (f"{length:,} B, " if length is not None else "") + f"sha256 {(got or 'nothing')[:16]}…")
    if got is None:
        return bodydiff.Arrival(bodydiff.LOST, "", f"nothing arrived (HTTP {result.status})")
    if got == h.digest(data):
        return bodydiff.Arrival(bodydiff.SAME, bodydiff.byte_counts(len(data), len(data)), "the same bytes")
    error = result.body.get("error") if isinstance(result.body, dict) else None
    found = bodydiff.arrival(data, received(result), got_bytes=length, status=result.status,
                             said=str(error.get("message", ""))[:200] if isinstance(error, dict) else "")
    evidence += [f"{label}: {line}" for line in (found.counts, found.where, found.how) if line]
    return found


def said_of(how: str, bodies: list[tuple[str, bodydiff.Arrival]]) -> str:
    """Bodies that arrived alike: each named with the bytes that arrived of it, what became of their values, and
    where the first one first differs."""
    counts = {found.counts for _, found in bodies}
    if len(counts) == 1:
        said = ", ".join(label for label, _ in bodies) + ": " + "; ".join(filter(None, (counts.pop(), how)))
    else:
        said = ", ".join(f"{label} ({found.counts})" if found.counts else label for label, found in bodies) + f": {how}"
    where = bodies[0][1].where
    return said + (f"; {where}" if where else "")


def received(result) -> bytes | None:
    """The body the mock received, from its answer (``x-mock-echo-body``), or None."""
    field = result.body.get(RECEIVED_BODY_FIELD) if isinstance(result.body, dict) else None
    try:
        return base64.b64decode(field) if isinstance(field, str) else None
    except ValueError:
        return None
