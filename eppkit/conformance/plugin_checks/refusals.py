"""Refusals are clean: a plugin that refuses some requests by design (an auth gate, a prompt guard) answers them with
an OpenAI-style error (``{"error": {"message", "type", ...}}``, ``application/json``), never plain text nor an empty
body, and nothing of a refused request reaches the backend.

The kit cannot know your gate: you tell it what your plugin lets through (``--plugin-let-through 'x-tenant: acme'``;
every other check's requests carry it). This check sends requests without it, and a prompt of 5,000 words (a
prompt guard's refusal), through the plugin and through its floor: an answer that is not a 2xx where the floor's is
a 2xx is the plugin's refusal, and each is judged.

The kit's Envoy rewrites a local reply that is not JSON into its own OpenAI error (``"type": "envoy_local_reply"``,
the original body and Envoy's response code details in its message: envoy/base.yaml.j2's local_reply_config). A
refusal the client gets in that form left the plugin as plain text (or empty): without such a mapper, as in your
Envoy, that is what your client gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import floor
from eppkit.conformance.registry import check
from eppkit.conformance.results import MUST, evidence_of, judged
from eppkit.conformance.witness import Sent

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result

REFUSALS = "refusals"
KIT_REWRITE = "envoy_local_reply"  # the error type of the kit's local_reply mapper (envoy/base.yaml.j2)
LONG_PROMPT_WORDS = 5000  # over a prompt guard's usual limit (4,096 tokens), under the mock's context (8,192)
# What is sent to be refused, without the let-through headers: (what, send's keyword arguments, let through).
REQUESTS = (
    ("a chat", {}, False),
    ("a streamed chat", {"stream": True, "max_tokens": 4}, False),
    ("a GET /v1/models", {"method": "GET"}, False),
    (f"a prompt of {LONG_PROMPT_WORDS} words", {"prompt": "word " * LONG_PROMPT_WORDS, "max_tokens": 1}, True),
)


def ok_status(status: int | None) -> bool:
    return bool(status) and 200 <= status < 300


def _kit_rewrite(body) -> str | None:
    """What the plugin wrote, when the client got the kit's rewrite of a local reply that was not JSON; else None."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or error.get("type") != KIT_REWRITE:
        return None
    message = str(error.get("message") or "")
    wrote = message.rsplit(" (", 1)[0] if message.endswith(")") else message
    return f"plain text {wrote!r}" if wrote else "an empty body"


def unclean(sent: Sent) -> str | None:
    """What is wrong with a refusal as the client got it (None: an OpenAI-style JSON error)."""
    result = sent.result
    if not result.status:
        return f"no answer ({result.error or 'nothing came back'})"
    kit = _kit_rewrite(result.body)
    if kit is not None:
        details = sent.hop["details"] if sent.hop is not None else None
        return (f"HTTP {result.status} with {kit} (Envoy's details {details}; the kit's local_reply mapper made it "
                "JSON, your Envoy would not)")
    kind = result.headers.get("content-type", "")
    error = result.body.get("error") if isinstance(result.body, dict) else None
    if not kind.startswith("application/json"):
        return f"HTTP {result.status} as {kind or 'no content-type'}: {str(result.body or '')[:80]!r}"
    if not isinstance(error, dict) or not all(isinstance(error.get(k), str) for k in ("message", "type")):
        return f"HTTP {result.status} JSON without error.message and error.type: {str(result.body)[:120]}"
    return None


def reached_backend(sent: Sent) -> str | None:
    """How a refused request reached the backend, by Envoy's access log and the backend's own answer; None: not."""
    upstream = sent.hop["upstream"] if sent.hop is not None else None
    if upstream not in (None, "", "-"):
        return f"Envoy sent it upstream to {upstream}"
    if sent.served_by is not None:
        return f"the backend {sent.served_by} answered it"
    return None


def refusal_problem(what: str, sent: Sent) -> str | None:
    """A refusal the plugin made, judged: how it is not clean or reached the backend; None: clean."""
    wrong = [w for w in (unclean(sent), reached_backend(sent)) if w]
    return f"{what}: {'; '.join(wrong)}" if wrong else None


@check("refusals-are-clean", "what the plugin refuses, it refuses in OpenAI-style JSON, before the backend",
       category=REFUSALS, level=MUST,
       source="OpenAI API errors ({\"error\": {\"message\", \"type\"}}); a gateway's refusal is an API error")
def refusals_are_clean(h: PluginHarness) -> Result:
    """A chat, a streamed chat and a GET without the headers the plugin lets through (--plugin-let-through), and a
    chat of {LONG_PROMPT_WORDS:,} words with them, through the \\
    plugin and its floor: each the floor serves (a 2xx from the backend)
    and the plugin does not is the plugin's refusal; each must be an OpenAI-style JSON error (the kit's rewrite of a
    plain-text local reply is not) and Envoy's access log must show no upstream for it. A plugin that refuses none
    of them passes on having served every one, and says so."""
    beds = {"plugin": h.bed(), "floor": floor.bed(h)}
    evidence, problems, refused, served = [], [], 0, []
    for what, kwargs, let_through in REQUESTS:
        sents = {side: h.send(bed, let_through=let_through, **kwargs) for side, bed in beds.items()}
        h.must_serve(sents["floor"], f"{what} on the floor")
        plugin = sents["plugin"]
        if ok_status(plugin.result.status) and not plugin.result.error:
            served.append(h.must_serve(plugin, f"{what} through the plugin", status=plugin.result.status))
            continue
        refused += 1
        evidence.append(f"{what} refused: HTTP {plugin.result.status}, {str(plugin.result.body)[:160]!r}; "
                        + evidence_of(plugin.hop))
        problem = refusal_problem(what, plugin)
        problems += [problem] if problem else []
    evidence += [f"served through the plugin: {evidence_of(s.hop)}" for s in served[:1]]
    gate = h.target.let_through_headers()
    without = f"without {', '.join(gate)}" if gate else "(no --plugin-let-through given)"
    return judged(problems, evidence,
                  failing="the plugin refused requests uncleanly",
                  passing=(f"{refused} refusal{'s' if refused > 1 else ''}, each OpenAI-style JSON that reached no "
                           "backend" if refused else
                           f"the plugin refused none of {len(REQUESTS)} requests ({without}, and a prompt of "
                           f"{LONG_PROMPT_WORDS} words): each served by the backend, as on the floor"),
                  fix="Refuse with a JSON body and content-type application/json: handle:respond({[\":status\"] = "
                      "\"403\", [\"content-type\"] = \"application/json\"}, '{\"error\": {\"message\": \"...\", "
                      "\"type\": \"...\"}}')")
