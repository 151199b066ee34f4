"""OpenAI response bodies: SSE chunks and whole JSON answers, chat and completions.

Chunk prefixes are built once per request so each token costs one small string
concatenation and one JSON string escape; the mock's capacity depends on it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from eppkit.services.vllm.api import CHAT

DONE = b"data: [DONE]\n\n"


class Renderer:
    def __init__(self, kind: str, request_id: str, model: str) -> None:
        self.kind = kind
        self.id = ("chatcmpl-" if kind == CHAT else "cmpl-") + request_id
        self.created = int(time.time())
        self.model = model
        obj = "chat.completion.chunk" if kind == CHAT else "text_completion"
        self._head = (
            '{"id":' + json.dumps(self.id) + ',"object":"' + obj + '","created":' + str(self.created)
            + ',"model":' + json.dumps(model) + ',"choices":[{"index":0,'
        )
        if kind == CHAT:
            # vLLM's order: a role-only chunk (content "") first, then one chunk per token; both go out
            # when the first token is ready, so TTFT is still the first *content* chunk's arrival.
            self._tail = '},"logprobs":null,"finish_reason":null}]}\n\n'
            self._next = 'data: ' + self._head + '"delta":{"content":'
            self._first = 'data: ' + self._head + '"delta":{"role":"assistant","content":""' + self._tail + self._next
        else:
            self._first = self._next = 'data: ' + self._head + '"text":'
            self._tail = ',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def token_chunk(self, token: str, first: bool) -> bytes:
        return ((self._first if first else self._next) + json.dumps(token) + self._tail).encode()

    def final_chunk(self, finish_reason: str, extra: dict[str, Any]) -> bytes:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if self.kind == CHAT:
            choice["delta"] = {}
        else:
            choice["text"] = ""
            choice["stop_reason"] = None
        return self._sse({**self._envelope(chunk=True), "choices": [choice], **extra})

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        return self._sse({**self._envelope(chunk=True), "choices": [], "usage": usage})

    def error_chunk(self, error: dict[str, Any]) -> bytes:
        return self._sse(error)

    def full(self, text: str, finish_reason: str, usage: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        if self.kind == CHAT:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        return {**self._envelope(chunk=False), "choices": [choice], "usage": usage, **extra}

    def _envelope(self, *, chunk: bool) -> dict[str, Any]:
        if self.kind == CHAT:
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    @staticmethod
    def _sse(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
