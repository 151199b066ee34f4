"""OpenAI response bodies: SSE chunks and whole JSON answers, chat and completions, with vLLM's fields.

Every field vLLM 0.32.0 puts into an answer is here, most of them null as vLLM sends them for a plain
request (``system_fingerprint``, ``service_tier``, ``token_ids``, ``prompt_logprobs``, the message's
``refusal`` ...), so a client or a parser built against vLLM sees the same shapes
(tests/integration/test_vllm_parity.py holds the two together; docs/mocks.md lists what still differs).

Chunk prefixes are built once per request so each token costs one small string
concatenation and one JSON string escape; the mock's capacity depends on it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from eppkit.services.openai_server.api import CHAT

DONE = b"data: [DONE]\n\n"
# vLLM's is "vllm-<version>-<hash of its config>"; the mock's names itself.
SYSTEM_FINGERPRINT = "eppkit-mock-vllm"
# What vLLM adds to every chat / completion answer beyond OpenAI's fields (null on a plain request).
_CHAT_TOP = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
_TRANSFER = {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
_MESSAGE = {"refusal": None, "annotations": None, "audio": None, "function_call": None, "reasoning": None}


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
            self._tail = '},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            self._next = 'data: ' + self._head + '"delta":{"content":'
            self._first = ('data: ' + self._head + '"delta":{"role":"assistant","content":""},"logprobs":null,'
                           '"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n' + self._next)
            self._first_tail = self._tail
        else:
            self._first = self._next = 'data: ' + self._head + '"text":'
            self._tail = (',"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
                          '"token_ids":null}]}\n\n')
            self._first_tail = self._tail

    def token_chunk(self, token: str, first: bool) -> bytes:
        if first:
            return (self._first + json.dumps(token) + self._first_tail).encode()
        return (self._next + json.dumps(token) + self._tail).encode()

    def final_chunk(self, finish_reason: str, extra: dict[str, Any], last: bool = True) -> bytes:
        """The chunk that ends the choice, as vLLM's when it ends on a stop (an empty last piece of text):
        ``extra`` (kv_transfer_params, multipart_metadata) only where it holds something; the system
        fingerprint when it is the ``last`` chunk (else the usage chunk after it carries it, as vLLM's)."""
        choice: dict[str, Any] = {"index": 0}
        if self.kind == CHAT:
            choice["delta"] = {"content": ""}
            choice.update(logprobs=None, finish_reason=finish_reason, stop_reason=None, token_ids=None)
        else:
            choice.update(text="", logprobs=None, finish_reason=finish_reason, stop_reason=None,
                          prompt_token_ids=None, token_ids=None)
        present = {k: v for k, v in extra.items() if v is not None}
        fingerprint = {"system_fingerprint": SYSTEM_FINGERPRINT} if last else {}
        return self._sse({**self._envelope(chunk=True), "choices": [choice], **present, **fingerprint})

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        """The usage chunk: as vLLM's, without the null details."""
        streamed = {**usage, "prompt_tokens_details": {k: v for k, v in usage["prompt_tokens_details"].items()
                                                       if v is not None}}
        streamed.pop("completion_tokens_details", None)
        return self._sse({**self._envelope(chunk=True), "choices": [], "usage": streamed,
                          "system_fingerprint": SYSTEM_FINGERPRINT})

    def full(self, text: str, finish_reason: str, usage: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self.kind == CHAT:
            choice["message"] = {"role": "assistant", "content": text, **_MESSAGE}
            choice.update(logprobs=None, finish_reason=finish_reason, stop_reason=None, token_ids=None,
                          routed_experts=None)
        else:
            choice.update(text=text, logprobs=None, finish_reason=finish_reason, stop_reason=None, token_ids=None,
                          prompt_logprobs=None, prompt_token_ids=None, routed_experts=None)
        top = _CHAT_TOP if self.kind == CHAT else {}
        return {**self._envelope(chunk=False), "choices": [choice], "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT, "usage": usage, **top, **_TRANSFER, **extra}

    def _envelope(self, *, chunk: bool) -> dict[str, Any]:
        if self.kind == CHAT:
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    @staticmethod
    def _sse(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, created_cache_tokens: int | None = None
          ) -> dict[str, Any]:
    """vLLM's usage with --enable-prompt-tokens-details: the prompt tokens its prefix cache held, and (chat) the
    tokens this request put into it (``created_cache_tokens``; vLLM's completions leave it null)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "created_cache_tokens": created_cache_tokens,
                                  "multimodal_tokens": None},
        "completion_tokens_details": None,
    }
