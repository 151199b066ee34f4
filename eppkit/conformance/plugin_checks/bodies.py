"""Bodies through the plugin byte for byte, both ways: what the client sends is what the backend receives (the mock's
``x-mock-request-sha256``: the digest the EPP verdict's bodies check reads), what the backend answers is what the
client receives (the mock's ``x-mock-response-sha256``). A plugin that declares it rewrites a direction
(``--plugin-rewrites request|response``) is not judged on it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import check
from eppkit.conformance.results import MUST, judged
from eppkit.conformance.witness import NotWitnessed, Sent
from eppkit.observability.client import H2C
from eppkit.services.pod_headers import HEADER_RESPONSE_SHA256

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result
    from eppkit.conformance.target import PluginTarget

BODIES = "bodies"
KIB, MIB = 1024, 1024 * 1024
SIZES = (0, 1, 16 * KIB - 1, 16 * KIB + 1, MIB)  # around Envoy's 16 KiB buffer slices, and a large one
LARGE = 8 * MIB  # written whole only: the largest body a filter buffering it must hold


def said(size: int) -> str:
    """A body's size as the rule says it: "0 B", "16 KiB−1", "1 MiB"."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        for off, suffix in ((0, ""), (-1, "−1"), (1, "+1")):
            if size - off >= unit and (size - off) % unit == 0:
                return f"{(size - off) // unit} {name}{suffix}"
    return f"{size} B"


SIZES_SAID = ", ".join(map(said, SIZES[:-1])) + f" and {said(SIZES[-1])}"  # what the rule says of them
LARGE_SAID, TRAILED_SAID = said(LARGE), said(MIB)
PACED = {"pieces": 8, "pause_s": 0.005}  # a body written in paced pieces: many data frames / chunks to the filter
# h2c only (Envoy's HTTP/1.1 codec drops request trailers): a body in pieces that ends with trailers
TRAILED = {"pieces": 4, "pause_s": 0.005, "trailers": {"x-eppkit-checksum": "trailer"}}
ANSWER_TOKENS = 200  # a non-streamed answer of a few KiB


def _declared(target: PluginTarget) -> str | None:
    if {"request", "response"} <= target.rewrites:
        return "the plugin declares it rewrites request and response bodies (--plugin-rewrites)"
    return None


def exact_body(size: int, model: str) -> bytes:
    """A chat request of exactly ``size`` bytes (its prompt one long word of ``x``); one shorter than the smallest
    such JSON is that many spaces (the backend answers it 400 and still reports the digest of what it received)."""
    head = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": ""}]}
    empty = len(json.dumps(head).encode())
    if size < empty:
        return b" " * size
    head["messages"][0]["content"] = "x" * (size - empty)
    return json.dumps(head).encode()


def _received(h: PluginHarness, sent: Sent, what: str) -> str:
    """The digest the backend reports for ``sent``'s body; NotWitnessed when no backend answered it."""
    got = h.body_digest(sent.result)
    if got is None or h.served_by(sent.result) is None:
        h.must_serve(sent, what, status=sent.result.status or 200)
        raise NotWitnessed(f"{what}: the backend reported no digest", sent, h.request_timeout_s)
    return got


class _FloorRefuses(Exception):
    """The floor itself refuses a body that is not JSON (a picker's mode reads every body): not judged."""


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _request_body(h: PluginHarness, beds: dict, data: bytes, traffic: dict, label: str) -> dict[str, str | None]:
    """What the backend received of ``data`` through each testbed (side -> sha256; None: the plugin's request got no
    answer from the backend, which the floor's did); NotWitnessed when the floor itself did not pass it unchanged;
    _FloorRefuses when the floor's picker refused a body that is not JSON."""
    sent = h.send(beds["floor"], raw_body=data, **traffic)
    if h.served_by(sent.result) is None and sent.result.status and not _is_json(data):
        raise _FloorRefuses(h.cause(sent))
    got = {"floor": _received(h, sent, f"a {label} body on the floor")}
    if got["floor"] != h.digest(data):
        raise NotWitnessed(f"a {label} body changed on the floor itself", sent, h.request_timeout_s)
    sent = h.send(beds["plugin"], raw_body=data, **traffic)
    reached = h.body_digest(sent.result) is not None and h.served_by(sent.result) is not None
    if not reached and sent.result.status and not sent.result.error:  # the plugin answered it itself: a refusal,
        raise NotWitnessed(f"a {label} body through the plugin was answered by the plugin, not the backend",
                           sent, h.request_timeout_s)  # refusals-are-clean's to judge, not a body's fate
    got["plugin"] = h.body_digest(sent.result) if reached else None
    if not reached:
        got["not served"] = h.cause(sent)
    return got


def _forms(protocol: str) -> list[tuple[int, dict]]:
    """(size, traffic) of every request body sent: each size whole and paced, 8 MiB whole, and on h2c 1 MiB that
    ends with trailers."""
    forms = [(size, traffic) for size in SIZES for traffic in ({}, PACED)] + [(LARGE, {})]
    return forms + ([(MIB, TRAILED)] if protocol == H2C else [])


def _label(size: int, traffic: dict) -> str:
    if "trailers" in traffic:
        return f"{size} B in {traffic['pieces']} pieces with request trailers"
    return f"{size} B" + (f" in {traffic['pieces']} paced pieces" if traffic else " whole")


@check("bodies-byte-for-byte", "bodies pass the plugin byte for byte, both ways", category=BODIES, level=MUST,
       source="HTTP semantics: a filter that does not say it rewrites a body forwards it unchanged", declared=_declared)
def bodies_byte_for_byte(h: PluginHarness) -> Result:
    """Request bodies of {SIZES_SAID}, each written whole and in {PACED[pieces]} paced pieces, {LARGE_SAID}
    whole, and on h2c {TRAILED_SAID} in {TRAILED[pieces]} pieces \\
    ending with request trailers, reach the backend with the sha256 the client
    sent; a non-streamed answer of a few KiB reaches the client with the sha256 the backend wrote. The same requests
    through the floor must do so too (else the testbed, not the plugin, changes them: not judged); one the floor
    delivers and the plugin never answers (held until the client gave up) fails; one the plugin refuses is
    refusals-are-clean's (not run here)."""
    beds = {"plugin": h.bed(), "floor": floor.bed(h)}
    rewrites = h.target.rewrites
    evidence, problems = [], []
    if "request" not in rewrites:
        model = beds["plugin"].backends[0].model
        for size, traffic in _forms(h.protocol):
            data = exact_body(size, model)
            label = _label(size, traffic)
            try:
                got = _request_body(h, beds, data, traffic, label)
            except _FloorRefuses as refused:
                evidence.append(f"request {label}: not judged, the floor itself refuses a body that is not JSON "
                                f"({refused})")
                continue
            if got["plugin"] is None:
                evidence.append(f"request {label}: the floor's backend received it whole; through the plugin "
                                f"{got['not served']}")
                problems.append(f"the {label} request did not reach the backend through the plugin "
                                f"({got['not served']})")
                continue
            evidence.append(f"request {label}: client sha256 {h.digest(data)[:16]}…, backend received "
                            f"{got['plugin'][:16]}… through the plugin, {got['floor'][:16]}… on the floor")
            if got["plugin"] != h.digest(data):
                problems.append(f"the {label} request body reached the backend changed")
        if h.protocol != H2C:
            evidence.append("request trailers: sent on h2c only (Envoy's HTTP/1.1 codec drops them)")
    else:
        evidence.append("request bodies: not judged (the plugin declares it rewrites them)")
    if "response" not in rewrites:
        for side, bed in beds.items():
            sent = h.must_serve(h.send(bed, max_tokens=ANSWER_TOKENS), f"a chat through the {side}")
            wrote, got = sent.result.headers.get(HEADER_RESPONSE_SHA256), sent.result.body_sha256
            if wrote is None:
                raise NotWitnessed(f"the backend's answer through the {side} carries no {HEADER_RESPONSE_SHA256}",
                                   sent, h.request_timeout_s)
            evidence.append(f"response through the {side}: backend wrote sha256 {wrote[:16]}…, client received "
                            f"{(got or 'nothing')[:16]}…")
            if got != wrote:
                if side == "floor":
                    raise NotWitnessed("the answer changed on the floor itself", sent, h.request_timeout_s)
                problems.append("the response body reached the client changed")
    else:
        evidence.append("response bodies: not judged (the plugin declares it rewrites them)")
    return judged(problems, evidence, failing="a body did not pass the plugin byte for byte",
                  passing="every body passed byte for byte" + (f" (not judged: {', '.join(sorted(rewrites))})"
                                                                if rewrites else ""),
                  fix="Forward bodies unchanged and continue every request, its trailers too (a module: return "
                      "Continue from OnRequestTrailers), or declare the direction you rewrite (--plugin-rewrites)")

