"""The same requests to a stand-in (the kit's mock, llm-d-inference-sim) and to a real vLLM, and what differs.

:func:`observe` sends one :class:`Case` and flattens what came back into ``path -> type`` (values where they
matter: the status, ``object``, the error's ``type``, ``finish_reason``, the content type); streams are
flattened per kind of chunk (``stream[first]``, ``[token]``, ``[finish]``, ``[usage]``). :func:`span_shape`
does the same for a request's ``llm_request`` span (name, kind, scope, attribute names and types, events,
children), :func:`metric_shape` for ``/metrics`` (each family's type and label names). :func:`differences`
compares a stand-in's observations with vLLM's; each difference is a :class:`Known` entry of :data:`KNOWN`
(what differs and why: the mock's deliberate additions, and what remains different), which
tests/integration/test_vllm_parity.py holds against the live servers and docs/mocks.md lists
(:func:`markdown`; a unit test keeps the two equal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

import requests
from prometheus_client.parser import text_string_to_metric_families

MODEL = "mock-llm"
MAX_MODEL_LEN = 2048  # the vllm preset's (eppkit.backends.real_vllm); the stand-ins are started with it
ABSENT = "absent"
DELIBERATE, REMAINING = "deliberate", "remaining"


@dataclass(frozen=True)
class Case:
    name: str
    body: Any = None  # a JSON body, or bytes sent as they are
    path: str = "/v1/chat/completions"
    method: str = "POST"


def _chat(**extra) -> dict:
    # ignore_eos: a real model stops at its end-of-sequence token; with it, both run to max_tokens
    return {"model": MODEL, "messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 6,
            "temperature": 0, "ignore_eos": True, **extra}


def _completion(**extra) -> dict:
    return {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
            "ignore_eos": True, **extra}


_USAGE = {"stream_options": {"include_usage": True}}
_LONG = " ".join(["word"] * (MAX_MODEL_LEN + 500))

# The served requests (their llm_request spans are compared too), then bad input.
SERVED = (
    Case("chat", _chat()),
    Case("chat-stream", _chat(stream=True)),
    Case("chat-stream-usage", _chat(stream=True, **_USAGE)),
    Case("completions", _completion(), "/v1/completions"),
    Case("completions-stream", _completion(stream=True), "/v1/completions"),
    Case("completions-stream-usage", _completion(stream=True, **_USAGE), "/v1/completions"),
)
CASES = SERVED + (
    Case("models", None, "/v1/models", "GET"),
    Case("invalid-json", b"{not json"),
    Case("body-array", b"[1, 2]"),
    Case("missing-model", {k: v for k, v in _chat().items() if k != "model"}),
    Case("unknown-model", _chat(model="no-such-model")),
    Case("missing-messages", {"model": MODEL, "max_tokens": 4}),
    Case("messages-not-a-list", _chat(messages="hi")),
    Case("max-tokens-negative", _chat(max_tokens=-1)),
    Case("max-tokens-over-context", _chat(max_tokens=MAX_MODEL_LEN + 1000)),
    Case("prompt-too-long", _completion(prompt=_LONG), "/v1/completions"),
    Case("prompt-too-long-stream", _chat(stream=True, messages=[{"role": "user", "content": _LONG}])),
    Case("completions-missing-prompt", {"model": MODEL, "max_tokens": 4}, "/v1/completions"),
    Case("temperature-negative", _chat(temperature=-1)),
    Case("n-2", _chat(n=2)),
    Case("unknown-path", _chat(), "/v1/no-such-path"),
    Case("wrong-method", None, "/v1/chat/completions", "GET"),
)

# Values kept as they are (everything else is reduced to its JSON type).
_VALUES = {"body.object", "body.error.type", "body.choices[].finish_reason", "body.choices[].message.role",
           "body.choices[].delta.role", "body.data[].object", "body.data[].owned_by"}
_HEADERS = ("content-type", "x-inference-pod", "x-request-id")


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return {float: "float", str: "str", list: "list", dict: "object"}[type(value)]


def flatten(value: Any, prefix: str, out: dict[str, str]) -> dict[str, str]:
    """``value`` as ``path -> type`` (lists merged over their items: ``choices[]``); :data:`_VALUES` kept."""
    if isinstance(value, dict):
        if not value:
            out.setdefault(prefix, "object (empty)")
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}", out)
    elif isinstance(value, list):
        if not value:
            out.setdefault(prefix, "list (empty)")
        for item in value:
            flatten(item, f"{prefix}[]", out)
    else:
        kept = _VALUES | {p.replace("body.", "") for p in _VALUES}
        shape = repr(value) if prefix.split("]", 1)[-1].lstrip(".") in kept or prefix in _VALUES else _type(value)
        if prefix in out and out[prefix] != shape:  # an item of a list that differs from its siblings
            shape = " | ".join(sorted({*out[prefix].split(" | "), shape}))
        out[prefix] = shape
    return out


def _chunk_kind(chunk: dict, first: bool) -> str:
    if first:
        return "first"
    if chunk.get("usage") and not chunk.get("choices"):
        return "usage"
    if "error" in chunk:
        return "error"
    if any(c.get("finish_reason") for c in chunk.get("choices") or []):
        return "finish"
    return "token"


def observe(base_url: str, case: Case, headers: dict[str, str] | None = None, timeout_s: float = 120.0) -> dict[str, str]:
    """One case sent to ``base_url``: its status, headers of note and body (or stream), flattened."""
    kwargs: dict[str, Any] = {"headers": {"Content-Type": "application/json", **(headers or {})}, "timeout": timeout_s}
    if isinstance(case.body, bytes):
        kwargs["data"] = case.body
    elif case.body is not None:
        kwargs["json"] = case.body
    resp = requests.request(case.method, base_url + case.path, **kwargs)
    out = {"status": str(resp.status_code)}
    for name in _HEADERS:
        value = resp.headers.get(name)
        out[f"header.{name}"] = ABSENT if value is None else (value if name == "content-type" else "present")
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        lines = [ln[len("data: "):] for ln in resp.text.splitlines() if ln.startswith("data: ")]
        out["stream.done"] = "present" if lines and lines[-1] == "[DONE]" else ABSENT
        for i, line in enumerate(ln for ln in lines if ln != "[DONE]"):
            chunk = json.loads(line)
            flatten(chunk, f"stream[{_chunk_kind(chunk, i == 0)}]", out)
        return out
    try:
        body = resp.json()
    except ValueError:
        out["body"] = "empty" if not resp.content else "not JSON"
        return out
    flatten(body, "body", out)
    return {k: v for k, v in out.items() if k != "body" or v}


def span_shape(span) -> dict[str, str]:
    """A request's ``llm_request`` span (a trace model Span) flattened: name, kind, scope, status, attribute
    names and types, event names, child span names."""
    out = {"span.name": span.name, "span.kind": str(span.kind), "span.scope": span.scope,
           "span.error": str(span.error)}
    for key, value in span.attributes.items():
        out[f"span.attributes.{key}"] = _type(value)
    for event in span.events:
        out[f"span.events.{event.name}"] = "present"
    for child in span.children:
        out[f"span.children.{child.name}"] = "present"
    return out


def metric_shape(text: str) -> dict[str, str]:
    """``/metrics`` as ``metric.<family> -> "<type> {label names}"`` (``le``/``quantile`` left out)."""
    out = {}
    for family in text_string_to_metric_families(text):
        labels = sorted({k for s in family.samples for k in s.labels} - {"le", "quantile"})
        out[f"metric.{family.name}"] = f"{family.type} {{{', '.join(labels)}}}"
    return out


# -- what differs, and why -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Known:
    """One difference between a stand-in and vLLM: where (a path, prefixed ``<case>: `` when it is one
    request's), the stand-in's and vLLM's value, whether it is the stand-in's deliberate choice or remains
    to be closed, and why."""

    where: str
    ours: str
    vllm: str
    kind: str
    why: str


def key_of(case: str, path: str, ours: str, vllm: str, failed: bool) -> str:
    """Where a difference is filed: by its path alone for a served request's shape, by case and path for
    an error's (each bad input answers differently)."""
    return f"{case}: {path}" if failed or path == "status" else path


def differences(ours: dict[str, dict[str, str]], vllm: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """Every case's observations of a stand-in against vLLM's: ``where -> (ours, vllm)``. The same path
    differing alike in several served requests is one entry."""
    found: dict[str, tuple[str, str]] = {}
    for case, mine in ours.items():
        theirs = vllm[case]
        failed = mine.get("status", "200") != "200" or theirs.get("status", "200") != "200"
        for path in sorted(set(mine) | set(theirs)):
            a, b = mine.get(path, ABSENT), theirs.get(path, ABSENT)
            if a != b:
                where = key_of(case, path, a, b, failed)
                if where in found and found[where] != (a, b):
                    where = f"{case}: {path}"
                found[where] = (a, b)
    return found


def unexplained(found: dict[str, tuple[str, str]], known: Iterable[Known]) -> tuple[list[str], list[str]]:
    """(differences :data:`KNOWN` does not list, as they are; listed ones that no longer occur)."""
    table = {k.where: (k.ours, k.vllm) for k in known}
    new = [f"{w}: ours {a!r}, vLLM {b!r}" for w, (a, b) in sorted(found.items()) if table.get(w) != (a, b)]
    gone = [f"{w}: ours {a!r}, vLLM {b!r}" for w, (a, b) in sorted(table.items()) if found.get(w) != (a, b)]
    return new, gone


# The differences each stand-in has from vLLM 0.32.0 (CPU, SmolLM2-135M), as the parity test finds them.
KNOWN: dict[str, tuple[Known, ...]] = {"mock": (), "llm-d-inference-sim": ()}


def markdown(stand_in: str) -> str:
    """The stand-in's differences as docs/mocks.md lists them."""
    rows = ["| where | the stand-in | vLLM | why |", "|---|---|---|---|"]
    for kind in (DELIBERATE, REMAINING):
        for k in KNOWN[stand_in]:
            if k.kind == kind:
                rows.append(f"| `{k.where}` | {_cell(k.ours)} | {_cell(k.vllm)} | {'**deliberate**: ' if kind == DELIBERATE else ''}{k.why} |")
    return "\n".join(rows) + "\n"


def _cell(value: str) -> str:
    return "–" if value == ABSENT else f"`{value}`".replace("|", "\\|")
