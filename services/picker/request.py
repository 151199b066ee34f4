"""The request as a picker sees it: headers, path, raw body, the parsed OpenAI JSON and its prompt."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eppkit.services.picker import headers as h
from eppkit.services.picker.tokenizer import Tokenized, tokenize


class BadRequest(ValueError):
    """The body is not an OpenAI request the picker can read (answered with 400)."""


@dataclass
class LlmRequest:
    headers: dict[str, str]  # lower-case names; pseudo-headers (":path") included
    body: bytes = b""
    json_body: dict[str, Any] | None = None
    model: str | None = None
    prompt: str = ""  # the text a prefix cache would see, in order
    stream: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    tokenized: Tokenized | None = None  # set by whoever tokenizes first (the frontend, in its own span)
    # The data plane's subset hint (headers.SUBSET): only these "ip:port" endpoints may be picked; None: no hint.
    subset: tuple[str, ...] | None = None

    @property
    def path(self) -> str:
        return self.headers.get(":path", "/")

    @property
    def method(self) -> str:
        return self.headers.get(":method", "GET")

    @property
    def requested_model(self) -> str | None:
        """The model the gateway routed on (``x-gateway-model-name``), else the body's."""
        return self.headers.get(h.MODEL) or self.model

    def tokens(self) -> Tokenized:
        """The prompt's tokens (tokenized once, on first use)."""
        if self.tokenized is None:
            self.tokenized = tokenize(self.json_body or {})
        return self.tokenized


def prompt_text(body: dict[str, Any]) -> str:
    """Flatten ``prompt`` (completions) or ``messages`` (chat) into one string, in order.

    Chat messages become ``<|role|>content`` segments so two conversations that share a
    system prompt share a textual prefix, as they would share KV blocks on a real server.
    Multimodal content parts contribute their text and a stable marker for each media item.
    """
    if "messages" in body and isinstance(body["messages"], list):
        parts: list[str] = []
        for message in body["messages"]:
            if not isinstance(message, dict):
                continue
            parts.append(f"<|{message.get('role', 'user')}|>")
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for item in content:
                    if not isinstance(item, dict):
                        continue
                    if item.get("type") == "text":
                        parts.append(str(item.get("text", "")))
                    else:
                        kind = item.get("type", "media")
                        ref = item.get(kind) if isinstance(item.get(kind), (dict, str)) else ""
                        url = ref.get("url", "") if isinstance(ref, dict) else ref
                        parts.append(f"<|{kind}:{url}|>")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(p if isinstance(p, str) else json.dumps(p) for p in prompt)
    return ""


def parse_request(headers: dict[str, str], body: bytes) -> LlmRequest:
    """Build an :class:`LlmRequest`; a non-empty body that is not a JSON object raises BadRequest."""
    req = LlmRequest(headers=headers, body=body)
    if not body:
        return req
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise BadRequest("request body must be a JSON object")
    req.json_body = parsed
    model = parsed.get("model")
    req.model = model if isinstance(model, str) else None
    req.prompt = prompt_text(parsed)
    req.stream = bool(parsed.get("stream", False))
    return req
