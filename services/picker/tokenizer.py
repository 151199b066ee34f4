"""The pickers' mock tokenizer (the sidecar frontend's preprocessing step; the kv-router scorer's input).

It uses the mock vLLM's own notion of tokens (``services.vllm.tokens``: words and punctuation
marks, chat messages flattened the same way), so the token count the frontend reports equals
the ``prompt_tokens`` the mock later reports, and the KV blocks the router reasons about are the
blocks the mock's prefix cache holds. Token ids are stable hashes (no vocabulary file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eppkit.services.openai_server.tokens import prompt_text_of, prompt_tokens, token_id


@dataclass(frozen=True)
class Tokenized:
    text: str
    tokens: list[str]
    token_ids: list[int]

    @property
    def count(self) -> int:
        return len(self.tokens)


def tokenize(body: dict[str, Any]) -> Tokenized:
    text = prompt_text_of(body)
    tokens = prompt_tokens(text)
    return Tokenized(text=text, tokens=tokens, token_ids=[token_id(t) for t in tokens])
