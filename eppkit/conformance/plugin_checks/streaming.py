"""A streamed answer through the plugin keeps the pace it has without it: the first token as soon, the tokens as far
apart. A filter that reads the whole response (Lua ``handle:body()`` on the response path, a module that buffers it)
holds every byte until the stream ends: its first token comes as late as its last."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import TIMED, check
from eppkit.conformance.results import MUST, evidence_of, judged
from eppkit.conformance.witness import NotWitnessed
from eppkit.services.vllm.request_in import HEADER_ITL, HEADER_TTFT

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result

STREAMING = "streaming"
TOKENS, TTFT_MS, ITL_MS = 10, 20, 20  # a stream of known pace: 10 tokens, 20 ms to the first and between each
PACE = {HEADER_TTFT: str(TTFT_MS), HEADER_ITL: str(ITL_MS)}
REQUESTS = 7  # per testbed and protocol, interleaved plugin / floor, after one unmeasured: their medians compared


def _beyond_backend(sent) -> float:
    """The client's time to first token less the backend's own time to its first byte as Envoy recorded it
    (upstream start to upstream first byte: no filter is in it). On a busy machine the mock's first byte wanders by
    several ms a request; what is left is what Envoy and the filters (request path and response path) added."""
    return sent.result.ttft_ms - sent.hop.phases().get("upstream", 0.0)


@check("streaming-preserved", "a streamed answer keeps its pace through the plugin", category=STREAMING, level=MUST,
       source="OpenAI streaming (SSE); a gateway filter must not buffer a stream", uses=(TIMED,))
def streaming_preserved(h: PluginHarness) -> Result:
    """Streamed chats of {TOKENS} tokens at {ITL_MS} ms (the mock \\
    paced by ``{HEADER_TTFT}`` / ``{HEADER_ITL}``), {REQUESTS!w} through
    the plugin and {REQUESTS!w} through the floor, \\
    interleaved, after one unmeasured chat on each: the client's time to first
    token, less the backend's own time to its first byte \\
    (Envoy's record), is in median no later than max({floor.MIN_MS:g} ms,
    {floor.SHARE!p}) after the floor's, and the median inter-token gap \\
    within max({floor.MIN_MS:g} ms, {floor.SHARE!p}) of the floor's either way. Every
    stream must be served whole on both testbeds."""
    beds = {"plugin": h.bed(), "floor": floor.bed(h)}
    for side, bed in beds.items():  # a fresh testbed's first request pays for its connections: not measured
        h.must_serve(h.send(bed), f"a chat through the {side}")
    sents: dict[str, list] = {side: [] for side in beds}
    for _ in range(REQUESTS):
        for side, bed in beds.items():
            sent = h.must_serve(h.send(bed, stream=True, max_tokens=TOKENS, headers=PACE),
                                f"a streamed chat through the {side}")
            if len(sent.result.tokens) != TOKENS:
                raise NotWitnessed(f"a streamed chat through the {side} carried {len(sent.result.tokens)} tokens, "
                                   f"not {TOKENS}", sent, h.request_timeout_s)
            sents[side].append(sent)
    ttft = {side: floor.median(s.result.ttft_ms for s in sent) for side, sent in sents.items()}
    beyond = {side: floor.median(_beyond_backend(s) for s in sent) for side, sent in sents.items()}
    itl = {side: floor.median(gap for s in sent for gap in s.result.itl_ms) for side, sent in sents.items()}
    evidence = [(f"time to first token (client, median): {ttft['plugin']:.1f} ms through the plugin, "
                f"{ttft['floor']:.1f} ms on the floor")]
    problems = []
    for what, figures, later_only in (("time to first token beyond the backend's own (median)", beyond, True),
                                      ("inter-token gap (client, median)", itl, False)):
        line, problem = floor.compared(what, figures["plugin"], figures["floor"], later_only=later_only)
        evidence.append(line)
        problems += [problem] if problem else []
    evidence += [f"{side}: {evidence_of(sent[-1].hop)}" for side, sent in sents.items()]
    return judged(problems, evidence, failing="the plugin changed the stream's pace",
                  passing=f"the stream kept its pace (time to first token {ttft['plugin']:.1f} ms, floor "
                          f"{ttft['floor']:.1f} ms, beyond the backend's {beyond['plugin']:.1f} ms, floor "
                          f"{beyond['floor']:.1f} ms; gap {itl['plugin']:.1f} ms, floor {itl['floor']:.1f} ms)",
                  fix="Let the response through as it comes (Lua: no handle:body() on the response, use "
                      "bodyChunks(); a module: continue each chunk instead of buffering it)")
