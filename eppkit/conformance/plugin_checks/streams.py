"""Streams of every shape are served, or refused cleanly: a request without a body (``GET /v1/models``: its headers
end the stream), 64 streamed chats at once, and clients that give up (a stream cancelled mid-answer; on h2c also a
body abandoned half-way). After them Envoy is up as it was and serves the next chat.

A filter that keeps state per stream and takes for granted that every stream ends with its answer meets a cancelled
one here: a dynamic module that panics on it ends Envoy's process, and every stream on it. Runs last, so that a
plugin that takes Envoy down takes no other check with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import alive, floor, refusals
from eppkit.conformance.registry import MAY_TAKE_DOWN, check
from eppkit.conformance.results import MUST, evidence_of, judged
from eppkit.conformance.witness import NotWitnessed, Sent, served
from eppkit.observability.client import H2C
from eppkit.services.vllm.request_in import HEADER_ITL, HEADER_TTFT

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result

STREAMS = "streams"
AT_ONCE, AT_ONCE_TOKENS = 64, 4
# A stream of 40 tokens 20 ms apart (0.8 s), given up after its second token: well before its end.
LONG = {"stream": True, "max_tokens": 40, "headers": {HEADER_TTFT: "20", HEADER_ITL: "20"}}
CANCEL_AFTER_TOKENS = 2
ABANDONED = {"pieces": 8, "pause_s": 0.01, "cancel_after": 4}  # h2c: a body reset after 4 of its 8 pieces
SHOWN = 3  # problems of the 64 quoted


def _problem(what: str, sent: Sent, h, tokens: int | None = None) -> str | None:
    """What is wrong with ``sent`` through the plugin (None: served whole, or refused in OpenAI-style JSON)."""
    status = sent.result.status
    if status and not refusals.ok_status(status) and not sent.result.error:
        return refusals.refusal_problem(what, sent)
    if served(sent, status=status or 200) and (tokens is None or len(sent.result.tokens) == tokens):
        return None
    got = f", {len(sent.result.tokens)} of {tokens} tokens" if tokens is not None and status else ""
    return f"{what}: not served ({h.cause(sent)}{got})"


def _cancelled(h: PluginHarness, bed, side: str) -> Sent:
    """A stream given up after its second token; NotWitnessed when the floor's was not cut mid-answer."""
    sent = h.send(bed, cancel_after_tokens=CANCEL_AFTER_TOKENS, **LONG)
    got = len(sent.result.tokens)
    if side == "floor" and not (0 < got < LONG["max_tokens"] and sent.result.error):
        raise NotWitnessed(f"a stream on the floor was not cut mid-answer ({got} tokens)", sent, h.request_timeout_s)
    return sent


@check("streams-served", f"requests without a body, {AT_ONCE} streams at once and cancelled streams are served or "
       "refused cleanly", category=STREAMS, level=MUST, uses=(MAY_TAKE_DOWN,),
       source="HTTP semantics (RFC 9110 §6.4: a request without content) and HTTP/2 (RFC 9113 §8.1, RST_STREAM "
              "CANCEL): a gateway filter serves every stream its codec accepts and survives a client that goes away")
def streams_served(h: PluginHarness) -> Result:
    """Through the floor, then the plugin: a GET /v1/models (no \\
    body); {AT_ONCE} streamed chats of {AT_ONCE_TOKENS} tokens at once, each
    served whole; a stream of {LONG[max_tokens]} tokens the client gives \\
    up after {CANCEL_AFTER_TOKENS!w} (HTTP/1.1: it closes the connection; h2c: it
    resets the stream), and on h2c a body reset after \\
    {ABANDONED[cancel_after]} of its {ABANDONED[pieces]} pieces. Each must be served, or refused in
    OpenAI-style JSON. After them Envoy's admin answers LIVE with its server.uptime not gone back (the same process)
    and a chat through the plugin is served. A failure quotes Envoy's last words (a module's panic) when it is gone."""
    beds = {"plugin": h.bed(), "floor": floor.bed(h)}
    _, uptime = alive.envoy_up(h, beds["plugin"])
    evidence, problems = [], []

    sents = {side: h.send(bed, method="GET") for side, bed in beds.items()}
    h.must_serve(sents["floor"], "a GET /v1/models on the floor")
    problems += [p for p in [_problem("a GET /v1/models (no body)", sents["plugin"], h)] if p]
    evidence.append(f"a GET /v1/models (no body): HTTP {sents['plugin'].result.status} through the plugin, "
                    f"{sents['floor'].result.status} on the floor; {evidence_of(sents['plugin'].hop)}")

    many = {"stream": True, "max_tokens": AT_ONCE_TOKENS}
    # at once: a plugin's harness sends a check's requests together (Harness.concurrent)
    floor_many = h.send_all(beds["floor"], [many] * AT_ONCE)
    unserved = [s for s in floor_many if _problem("", s, h, AT_ONCE_TOKENS)]
    if unserved:
        h.must_serve(unserved[0], f"one of {AT_ONCE} streams at once on the floor")
        raise NotWitnessed(f"{len(unserved)} of {AT_ONCE} streams at once on the floor were not served whole",
                           unserved[0], h.request_timeout_s)
    plugin_many = h.send_all(beds["plugin"], [many] * AT_ONCE)
    wrong = [p for p in (_problem(f"one of {AT_ONCE} streams at once", s, h, AT_ONCE_TOKENS) for s in plugin_many)
             if p]
    whole = sum(1 for s in plugin_many if served(s) and len(s.result.tokens) == AT_ONCE_TOKENS)
    evidence.append(f"{AT_ONCE} streams at once: {whole} served whole through the plugin, "
                    f"{AT_ONCE - whole - len(wrong)} refused cleanly, {len(wrong)} neither; {AT_ONCE} served whole "
                    "on the floor")
    if wrong:
        problems.append(f"{len(wrong)} of {AT_ONCE} streams at once: " + "; ".join(wrong[:SHOWN]))

    gave_up = [("a stream cancelled mid-answer", _cancelled)]
    if h.protocol == H2C:
        body = (f'{{"model": "{beds["floor"].backends[0].model}", "max_tokens": 1, "messages": [{{"role": "user", '
                f'"content": "{"x" * 65536}"}}]}}').encode()
        gave_up.append(("a body abandoned after 4 of 8 pieces",
                        lambda h, bed, side: h.send(bed, raw_body=body, **ABANDONED)))
    for what, send in gave_up:
        for side in ("floor", "plugin"):
            sent = send(h, beds[side], side)
            record = evidence_of(sent.hop) if sent.hop is not None else "Envoy logged no line for it yet"
            evidence.append(f"{what} ({side}): {len(sent.result.tokens)} tokens, the client: "
                            f"{sent.result.error or 'not cancelled'}; {record}")

    down = alive.gone(h, beds["plugin"], uptime)
    after = h.send(beds["plugin"])
    if down:
        problems.insert(0, f"after clients gave up on streams: {down}")
    else:
        problems += [p for p in [_problem("a chat after the cancelled streams", after, h)] if p]
    evidence.append(f"after: {evidence_of(after.hop) if after.hop is not None else h.cause(after)}")
    return judged(problems, evidence,
                  failing="the plugin did not serve every stream, or did not survive a client that gave up",
                  passing=f"a request without a body, {AT_ONCE} streams at once and the cancelled ones served or "
                          "refused cleanly; Envoy up as it was after them",
                  fix="Handle a stream that ends early: the end of a request at its headers (no body callback "
                      "comes), a stream reset before its answer ends (nothing set in the answer's callbacks is "
                      "there); never hold a stream for a body or trailers that may not come")
