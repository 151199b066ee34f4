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
import re
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
    Case("n-2", _chat(n=2)),  # greedy: vLLM refuses n > 1
    Case("n-2-sampled", _chat(n=2, temperature=0.7)),
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
        if value == "":  # an empty piece of text (a role-only first chunk, a finish chunk of its own)
            shape = "str (empty)"
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
        if family.name.endswith("_created"):  # a counter's or histogram's creation time: follows its family
            continue
        labels = sorted({k for s in family.samples for k in s.labels} - {"le", "quantile"})
        out[f"metric.{family.name}"] = f"{family.type} {{{', '.join(labels)}}}"
    return out


# A prompt long enough to fill whole KV blocks on any server (the mock's of 16 tokens, a CPU vLLM's of up to 128),
# sent twice while its KV-cache events are read (:func:`kv_event_shape`).
KV_PROMPT = _chat(messages=[{"role": "user", "content": " ".join(f"block{i % 37} word{i}" for i in range(200))}],
                  max_tokens=2)


def _kv_type(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return f"bytes[{len(value)}]"
    if isinstance(value, list):
        return f"list[{_kv_type(value[0])}]" if value else "list (empty)"
    if isinstance(value, dict):
        return "map"
    return _type(value)


def kv_event_shape(publisher: str, base_url: str, timeout_s: float = 20.0, *, dials: bool = False) -> dict[str, str]:
    """A server's KV-cache events while :data:`KV_PROMPT` is sent to it twice: the frames, the batch, each event kind
    and each field's type (``kv.BlockStored.block_hashes -> list[bytes[32]]``), flattened like an answer; and which
    end binds the socket (``kv.socket``). ``dials``: the server's publisher connects to ``publisher`` (the
    simulator's, as llm-d's KV-cache indexer binds one socket all pods dial), so the subscriber binds it."""
    import time

    import msgpack
    import zmq

    from zmq.utils.monitor import recv_monitor_message

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    joined = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    if dials:
        sub.bind(publisher)
    else:
        sub.connect(publisher)
    out: dict[str, str] = {"kv.socket": "the subscriber binds, the server dials" if dials else
                           "the server binds, the subscriber connects"}
    kinds: dict[str, set[str]] = {}  # a field's types over every event of its kind ("bytes[32] | null")
    try:
        # A SUB sees only what is published after it joined: the requests wait for the two ends' handshake (a dialer
        # retries; a fixed 2 s lost every event once in CI, the simulator dialling late on a busy machine), then for
        # the subscription to reach the publisher.
        if joined.poll(int(timeout_s * 1000)):
            recv_monitor_message(joined)
            time.sleep(0.3)
        for _ in range(2):
            requests.post(f"{base_url}/v1/chat/completions", json=KV_PROMPT, timeout=120).raise_for_status()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and sub.poll(1000 if "kv.BlockStored" in out else 5000):
            frames = sub.recv_multipart()
            out["kv.frames"] = f"{len(frames)}: topic str, seq bytes[{len(frames[1])}], payload" if len(frames) == 3 \
                else f"{len(frames)} frames"
            batch = msgpack.unpackb(frames[-1], raw=False)
            out["kv.batch"] = f"array[{len(batch)}]: {', '.join(_kv_type(v) if i != 1 else 'events' for i, v in enumerate(batch))}"
            for event in batch[1]:
                if isinstance(event, dict):
                    tag, fields = event.get("type"), {k: v for k, v in event.items() if k != "type"}
                    out[f"kv.{tag}"] = "map tagged type"
                else:
                    tag, fields = event[0], {f"[{i}]": v for i, v in enumerate(event[1:], start=1)}
                    out[f"kv.{tag}"] = "array, tag first"
                for name, value in fields.items():
                    kinds.setdefault(f"kv.{tag}.{name}", set()).add(_kv_type(value))
    finally:
        sub.disable_monitor()
        joined.close(0)
        sub.close(0)
        ctx.term()
    return {**out, **{path: " | ".join(sorted(types)) for path, types in kinds.items()}}


# -- what differs, and why -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Known:
    """One difference between a stand-in and vLLM: where (a path, prefixed ``<case>: `` when it is one
    request's), the stand-in's and vLLM's value, whether it is the stand-in's deliberate choice or remains
    to be closed, and why. ``*`` in any of the three matches anything (a group of differences alike)."""

    where: str
    ours: str
    vllm: str
    kind: str
    why: str

    def matches(self, where: str, ours: str, vllm: str) -> bool:
        return all(_match(p, t) for p, t in ((self.where, where), (self.ours, ours), (self.vllm, vllm)))


def _match(pattern: str, text: str) -> bool:
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), text) is not None


def differences(ours: dict[str, dict[str, str]], vllm: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """Every case's observations of a stand-in against vLLM's: ``where -> (ours, vllm)``.

    A case answered with another status is that one difference (``<case>: status``; its body follows from it).
    A path that differs alike wherever it differs is one entry (``body.system_fingerprint``); one that differs
    otherwise from case to case is an entry per case (``<case>: body.error.type``)."""
    per_path: dict[str, dict[str, tuple[str, str]]] = {}
    found: dict[str, tuple[str, str]] = {}
    for case, mine in ours.items():
        theirs = vllm[case]
        if mine.get("status") != theirs.get("status"):
            found[f"{case}: status"] = (mine.get("status", ABSENT), theirs.get("status", ABSENT))
            continue
        for path in set(mine) | set(theirs):
            pair = (mine.get(path, ABSENT), theirs.get(path, ABSENT))
            if pair[0] != pair[1]:
                per_path.setdefault(path, {})[case] = pair
    for path, cases in per_path.items():
        if len(set(cases.values())) == 1:
            found[path] = next(iter(cases.values()))
        else:
            found.update({f"{case}: {path}": pair for case, pair in cases.items()})
    return dict(sorted(found.items()))


def unexplained(found: dict[str, tuple[str, str]], known: Iterable[Known]) -> tuple[list[str], list[str]]:
    """(differences :data:`KNOWN` does not list, as they are; listed ones that no longer occur)."""
    known = list(known)
    new = [f"{w}: ours {a!r}, vLLM {b!r}" for w, (a, b) in found.items() if not any(k.matches(w, a, b) for k in known)]
    gone = [f"{k.where}: ours {k.ours!r}, vLLM {k.vllm!r}" for k in known
            if not any(k.matches(w, a, b) for w, (a, b) in found.items())]
    return new, gone


# The differences each stand-in has from vLLM 0.32.0 (CPU, SmolLM2-135M, as the vllm preset runs it: LoRA enabled,
# prompt token details on), as the parity test finds them.
_D, _R = DELIBERATE, REMAINING
_OPENAI_ERRORS = ("every answer of the kit's services is OpenAI-style JSON; vLLM's router answers an unknown path "
                  "or method with Starlette's `{\"detail\": ...}`")
_STRING_CODES = ("the error's `code` names the failure (`context_length_exceeded`, `model_not_found`), as OpenAI's "
                 "API does; vLLM puts the HTTP status there")
_STEPS = "the mock's steps and identity, which the kit's checks, waterfalls and `eppkit compare` read"
_FINISH = ("a stream that ends by length: vLLM puts `finish_reason` on the last token's chunk; the mock sends a "
           "chunk of its own with empty text, as vLLM does when a stream ends on a stop")

_SIM_KV = ("its KV events are positional arrays, the tag first and the fields in vLLM's order up to `lora_name` (the "
           "older msgpack `array_like` encoding; llm-d's readers take both), without `group_idx` and "
           "`kv_cache_spec_kind`; vLLM 0.32 sends tagged maps")

KNOWN: dict[str, tuple[Known, ...]] = {
    "mock": (
        Known("header.x-inference-pod", "present", ABSENT, _D, "llm-d's pod header: tests and pickers read which pod "
              "served (for vLLM, `bed.served_pod(headers)` reads Envoy's `x-gateway-destination-endpoint-served`)"),
        Known("header.x-request-id", "present", ABSENT, _D, "the request id echoed (vLLM echoes it only with "
              "`--enable-request-id-headers`)"),
        Known("body.data[].owned_by", "'eppkit'", "'vllm'", _D, "says who serves"),
        Known("body.detail", ABSENT, "str", _D, _OPENAI_ERRORS),
        Known("body.error.message", "str", ABSENT, _D, _OPENAI_ERRORS),
        Known("body.error.param", "null", ABSENT, _D, _OPENAI_ERRORS),
        Known("unknown-path: body.error.code", "int", ABSENT, _D, _OPENAI_ERRORS),
        Known("unknown-path: body.error.type", "'NotFoundError'", ABSENT, _D, _OPENAI_ERRORS),
        Known("wrong-method: body.error.code", "int", ABSENT, _D, _OPENAI_ERRORS),
        Known("wrong-method: body.error.type", "'BadRequestError'", ABSENT, _D, _OPENAI_ERRORS),
        Known("max-tokens-over-context: body.error.code", "str", "int", _D, _STRING_CODES),
        Known("prompt-too-long: body.error.code", "str", "int", _D, _STRING_CODES),
        Known("prompt-too-long-stream: body.error.code", "str", "int", _D, _STRING_CODES),
        Known("unknown-model: body.error.code", "str", "int", _D, _STRING_CODES),
        Known("span", "present", ABSENT, _D, "a refused request has its `llm_request` span too (status ERROR, "
              "`http.response.status_code`); vLLM traces only what its engine ran"),
        *[Known(f"span.attributes.{a}", t, ABSENT, _D, _STEPS) for a, t in (
            ("gen_ai.response.finish_reasons", "list"), ("gen_ai.response.model", "str"),
            ("gen_ai.usage.num_sequences", "int"), ("vllm.api", "str"), ("vllm.instance", "str"),
            ("vllm.role", "str"), ("vllm.stream", "bool"))],
        *[Known(f"span.children.{c}", "present", ABSENT, _D, _STEPS) for c in ("vllm.queue", "vllm.prefill",
                                                                                "vllm.decode")],
        Known("span.events.first_token", "present", ABSENT, _D, _STEPS),
        *[Known(f"metric.eppkit_mock_{m}", v, ABSENT, _D, "the mock's own metrics, never under `vllm:`") for m, v in (
            ("client_cancellations", "counter {engine, model_name}"), ("injected_failures", "counter {}"),
            ("request_errors", "counter {engine, model_name, status}"),
            ("token_lateness_seconds", "histogram {engine, model_name}"))],
        *[Known(f"metric.http_{m}", ABSENT, v, _R, "vLLM's HTTP instrumentation (prometheus-fastapi-instrumentator): "
                "nothing in the kit reads it, and it would cost the mock a middleware per request") for m, v in (
            ("request_duration_highr_seconds", "histogram {}"), ("request_duration_seconds", "histogram {handler, method}"),
            ("request_size_bytes", "summary {handler}"), ("requests", "counter {handler, method, status}"),
            ("response_size_bytes", "summary {handler}"))],
        *[Known(f"metric.vllm:estimated_{m}_per_gpu", ABSENT, "counter {engine, model_name}", _R,
                "estimates of the model's work per GPU: the mock computes nothing") for m in ("flops", "read_bytes",
                                                                                            "write_bytes")],
        Known("metric.vllm:iteration_tokens_total", ABSENT, "histogram {engine, model_name}", _R,
              "tokens per engine step: the mock has no engine steps"),
        Known("n-2-sampled: status", "400", "200", _R, "the mock serves n=1 only; vLLM samples n choices (both refuse "
              "n > 1 at temperature 0)"),
        Known("stream[finish].choices[].delta.content", "str (empty)", "str", _R, _FINISH),
        Known("stream[finish].choices[].text", "str (empty)", "str", _R, _FINISH),
    ),
    "llm-d-inference-sim": (
        Known("header.x-inference-pod", "present", ABSENT, _D, "the kit gives it `POD_NAME`: it names the pod, as the "
              "mock"),
        Known("missing-model: status", "404", "200", _R, f"it requires `model`; vLLM serves its first model"),
        *[Known(f"{case}: status", "200", "400", _R, f"it checks less, and serves what vLLM refuses")
          for case in ("missing-messages", "temperature-negative", "prompt-too-long-stream")],
        *[Known(f"{case}: status", "500", vllm, _R, "with its KV cache on (`--enable-kvcache`, as the parity test runs "
                "it for its events) a request for n > 1 choices fails: 500 `request already exists for id ...` (its "
                "block cache refuses the request's second sequence, which has the same id); without it, it serves "
                "both") for case, vllm in (("n-2", "400"), ("n-2-sampled", "200"))],
        Known("body", "not JSON", ABSENT, _R, f"an unknown path or method is plain text"),
        Known("*: header.content-type", "*", "*", _R, f"its streams say `text/event-stream` without a "
              "charset; its unknown path and method `text/plain`"),
        Known("body.error.param", "null", "str", _R, f"its errors name no parameter"),
        Known("body.error.type", "'BadRequestError'", "'Bad Request'", _R, f"a body vLLM's request model "
              "refuses is vLLM's `Bad Request`"),
        Known("*body.usage.prompt_tokens_details.created_cache_tokens", ABSENT, "*", _R, f"its usage counts "
              "cached tokens only"),
        Known("stream[*].usage", "null", ABSENT, _R, f"every chunk says `usage: null`"),
        Known("stream[first].choices[].delta.content", ABSENT, "str (empty)", _R, f"its first chat chunk has "
              "the role alone, without vLLM's empty content"),
        Known("stream[finish].choices[].delta", "object (empty)", ABSENT, _R, f"{_FINISH.split(':')[0]}: its "
              "last chunk is a chunk of its own with an empty delta"),
        Known("stream[finish].choices[].text", "str (empty)", "str", _R, f"{_FINISH.split(':')[0]}: its last "
              "chunk is a chunk of its own"),
        Known("body.*", ABSENT, "*", _R, f"vLLM's additions to OpenAI's answer (its null fields, "
              "`system_fingerprint`, the model permission card)"),
        Known("stream[*]*", ABSENT, "*", _R, f"vLLM's additions to OpenAI's chunks"),
        Known("metric.*", "* {model_name}", "* {engine, model_name}", _R, f"no `engine` label"),
        Known("metric.vllm:request_success", "counter {finish_reason, model_name}",
              "counter {engine, finished_reason, model_name}", _R, f"its label is `finish_reason`, vLLM's "
              "`finished_reason`"),
        Known("metric.vllm:cache_config_info", "gauge {block_size, num_gpu_blocks}", "*", _R,
              f"two of vLLM's labels"),
        Known("metric.vllm:*", "histogram {model_name}", ABSENT, _R, f"names vLLM 0.32 no longer uses "
              "(`max_num_generation_tokens`, `time_per_output_token_seconds`)"),
        Known("metric.*", ABSENT, "*", _R, f"families vLLM has and it has not (the process and Python "
              "collectors, HTTP instrumentation, the prefix cache, preemptions, prompt sources, admission, sleep "
              "state, ...)"),
        Known("kv.socket", "the subscriber binds, the server dials", "the server binds, the subscriber connects", _R,
              "its KV-events publisher dials one endpoint (`--zmq-endpoint`: llm-d's KV-cache indexer binds it and "
              "every pod connects), where vLLM's binds and its subscribers connect: a subscriber that connects to "
              "each pod, as the kit's kv-events-scorer does, hears nothing from it"),
        Known("kv.BlockStored", "array, tag first", "map tagged type", _R, _SIM_KV),
        Known("kv.BlockStored.[*]", "*", ABSENT, _R, _SIM_KV),
        Known("kv.BlockStored.*", ABSENT, "*", _R, _SIM_KV),
    ),
}


def markdown(stand_in: str) -> str:
    """The stand-in's differences as docs/mocks.md lists them: deliberate ones first, one row per reason."""
    groups: dict[tuple[str, str], list[Known]] = {}
    for kind in (DELIBERATE, REMAINING):
        for k in KNOWN[stand_in]:
            if k.kind == kind:
                groups.setdefault((k.kind, k.why), []).append(k)
    label = {"mock": "the mock", "llm-d-inference-sim": "the simulator"}[stand_in]
    rows = [f"| where (`*`: any): {label} → vLLM | why |", "|---|---|"]
    for (kind, why), entries in groups.items():
        values = {(k.ours, k.vllm) for k in entries}
        if len(values) == 1:
            ours, vllm = values.pop()
            where = f"{', '.join(f'`{k.where}`' for k in entries)}: {_cell(ours)} → {_cell(vllm)}"
        else:
            where = "; ".join(f"`{k.where}`: {_cell(k.ours)} → {_cell(k.vllm)}" for k in entries)
        rows.append(f"| {where} | {'**deliberate**: ' if kind == DELIBERATE else ''}{why} |")
    return "\n".join(rows) + "\n"


def _cell(value: str) -> str:
    return "–" if value == ABSENT else ("any" if value == "*" else f"`{value}`".replace("|", "\\|"))


BEGIN = "<!-- parity: {} (generated from tests/support/parity.py: python -m tests.support.parity) -->"
END = "<!-- parity end -->"


def render_into(text: str) -> str:
    """docs/mocks.md with each stand-in's section between its markers replaced by :func:`markdown`."""
    for stand_in in KNOWN:
        head, sep, rest = text.partition(BEGIN.format(stand_in))
        _, sep2, tail = rest.partition(END)
        if not sep or not sep2:
            raise ValueError(f"docs/mocks.md has no {BEGIN.format(stand_in)!r} ... {END!r} section")
        text = f"{head}{BEGIN.format(stand_in)}\n{markdown(stand_in)}{END}{tail}"
    return text


if __name__ == "__main__":  # python -m tests.support.parity: regenerate docs/mocks.md's difference tables
    from pathlib import Path

    doc = Path(__file__).parents[2] / "docs" / "mocks.md"
    doc.write_text(render_into(doc.read_text()))
    print(f"wrote {doc}")
