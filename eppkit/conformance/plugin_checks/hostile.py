"""Hostile input survives: the kit's hostile requests that reach a filter (well-formed HTTP that Envoy's codec
accepts: bodies that are not JSON, cut short, not UTF-8, huge, a ``model`` that is not a string, the wrong
content-type, odd, huge and very many headers) sent through the plugin, each also through its floor. Envoy stays up
(its admin ``/ready`` answers LIVE, ``server.uptime`` did not go back), the plugin's script raises no error on them,
and no 5xx is the plugin's; a non-2xx the plugin made (its answer differs from the floor's) is an OpenAI-style error.

The codec's own refusals (tests/e2e/test_hostile_envoy.py: bad framing, a 70 KB header) never reach a filter and are
not sent. Each request carries the headers the plugin lets through (--plugin-let-through): a refusal for want of
them is refusals-are-clean's. A script error on a plain request is no-script-errors': if a plain chat raises one,
the errors on hostile requests are not counted here (they are not the hostility's).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING

from eppkit.conformance.plugin_checks import alive, floor, refusals, script_errors
from eppkit.conformance.registry import MAY_TAKE_DOWN, check
from eppkit.conformance.results import MUST, evidence_of, judged
from eppkit.conformance.witness import NotWitnessed

if TYPE_CHECKING:
    from eppkit.conformance.harness import PluginHarness
    from eppkit.conformance.results import Result

HOSTILE = "robustness"
KIB = 1024
_counting = threading.Lock()  # a request and the errors counter read around it, one at a time (protocols run at once)


def cases(model: str) -> list[tuple[str, dict]]:
    """The hostile requests that reach a filter: (what, send's keyword arguments)."""
    chat = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    return [
        ("a body cut short", {"raw_body": json.dumps(chat).encode()[:-9]}),
        ("a body that is not JSON", {"raw_body": b"hello there, not JSON"}),
        ("an empty body", {"raw_body": b""}),
        ("a JSON array", {"raw_body": b"[]"}),
        ("a model that is a number", {"raw_body": json.dumps({**chat, "model": 42}).encode()}),
        ("a body that is not UTF-8", {"raw_body": json.dumps(chat).encode().replace(b"hi", b"\xff\xfe\xc0")}),
        ("JSON nested 2,000 deep", {"raw_body": b"[" * 2000 + b"]" * 2000}),
        ("1 MiB that is not JSON", {"raw_body": b"x" * (KIB * KIB)}),
        ("content-type text/plain", {"content_type": "text/plain"}),
        ("a 16 KiB header", {"headers": {"x-hostile": "a" * (16 * KIB)}}),
        ("60 extra headers", {"headers": {f"x-hostile-{i}": str(i) for i in range(60)}}),
        ("odd header values", {"headers": {"x-hostile": '"quoted" ;,= <tag> %00 \\', "x-empty": ""}}),
    ]


CASES = len(cases("model"))  # the hostile requests sent, as the rule counts them


def _errors_raised(h: PluginHarness, bed, floor_bed, send) -> tuple[object, int]:
    """``send()``'s Sent and the plugin's Lua errors it raised (its errors counters, read around it alone)."""
    with _counting:
        before = sum(script_errors.lua_errors(h, bed, floor_bed).values())
        sent = send()
        return sent, sum(script_errors.lua_errors(h, bed, floor_bed).values()) - before


def _made(plugin, floor_sent) -> bool:
    """The plugin made this answer: it is not the floor's (another status, or Envoy's details differ; a record
    Envoy has not logged yet is no difference)."""
    if plugin.result.status != floor_sent.result.status:
        return True
    return plugin.hop is not None and plugin.hop["details"] != floor_sent.hop["details"]


@check("hostile-input-survives", "hostile input reaching the plugin neither crashes it nor gets a 5xx from it",
       category=HOSTILE, level=MUST,
       source="eppkit's hostile-client cases (tests/e2e/test_hostile_envoy.py, test_fuzz.py): a gateway filter "
              "survives any request Envoy's codec accepts", uses=(MAY_TAKE_DOWN,))
def hostile_input_survives(h: PluginHarness) -> Result:
    """A plain chat, then {CASES!w} hostile requests that reach a filter (a body cut short, not JSON, empty, a JSON
    array, a numeric model, not UTF-8, nested 2,000 deep, 1 MiB of non-JSON, content-type text/plain, a 16 KiB
    header, 60 extra headers, odd header values), each through the plugin and its floor: Envoy's /ready answers
    LIVE after them and its server.uptime did not go back; the plugin's Lua errors counter does not move on any
    (unless it moved on the plain chat: then no-script-errors judges it); no answer the plugin made is a 5xx, and
    each non-2xx it made is an OpenAI-style error. A failure quotes Envoy's ``script log:`` line."""
    bed, floor_bed = h.bed(), floor.bed(h)
    lua = h.target.has_lua()
    _, uptime = alive.envoy_up(h, bed)
    plain, plain_errors = _errors_raised(h, bed, floor_bed, lambda: h.send(bed))
    h.must_serve(plain, "a plain chat through the plugin")
    evidence, problems, erred, judged_n = [], [], [], 0
    for what, kwargs in cases(bed.backends[0].model):
        floor_sent = h.send(floor_bed, **kwargs)
        if floor_sent.hop is None:  # the floor's Envoy has no record of it: no answer to hold the plugin's to
            evidence.append(f"{what}: not judged, the floor's Envoy logged no line for it")
            continue
        sent, raised = _errors_raised(h, bed, floor_bed, lambda kw=kwargs: h.send(bed, **kw))
        judged_n += 1
        evidence.append(f"{what}: HTTP {sent.result.status} through the plugin, {floor_sent.result.status} on the "
                        f"floor; {evidence_of(sent.hop)}")
        if raised and not plain_errors:
            erred.append(what)
        if _made(sent, floor_sent):
            status = sent.result.status or 0
            problem = (f"{what}: HTTP {status} from the plugin" if status >= 500 else
                       refusals.refusal_problem(what, sent) if not refusals.ok_status(status) else None)
            problems += [problem] if problem else []
    if not judged_n:
        raise NotWitnessed("no hostile request was answered on the floor", plain, h.request_timeout_s)
    live, after = alive.envoy_up(h, bed)
    evidence.insert(0, f"Envoy's admin: /ready {'LIVE' if live else 'not LIVE'}, server.uptime {uptime} s before, "
                       f"{after} s after")
    down = alive.gone(h, bed, uptime)
    if down:
        problems.insert(0, down)
    if erred:
        logged = script_errors.script_error_lines(bed)
        said = script_errors.quoted(logged)
        problems.append(f"script errors on {', '.join(erred)}" + (f" (Envoy: {said})" if said else ""))
        evidence += [f"Envoy logged: {line}" for line in logged]
    judged_errors = ("script errors: not judged, no Lua filter" if not lua else
                     "script errors: not counted here, the plugin errs on a plain chat too (no-script-errors)"
                     if plain_errors else "no script error")
    return judged(problems, evidence,
                  failing="hostile input broke the plugin",
                  passing=f"Envoy up and no 5xx from the plugin over {judged_n} hostile requests; {judged_errors}",
                  fix="Treat the body and headers as untrusted: check a parse's result (pcall) before using it, "
                      "and refuse what you cannot read with an OpenAI-style 400")
