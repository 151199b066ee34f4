"""Deterministic text: prompt token counting and the output token sequence.

The output depends only on (seed, prompt): a prefill instance and a decode instance given
the same seed and prompt produce the same tokens, which first-token streaming relies on
(the sidecar sends prefill's first token and drops decode's copy). ``random.Random`` with
a string seed hashes it with SHA-512, so the sequence does not depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from typing import Any

OUTPUT_WORDS = (
    "the quick brown fox jumps over lazy dog and then runs into forest where many tall trees "
    "stand quietly while birds sing bright songs about morning light falling on river stones "
    "near small village people walk slowly to market carrying bread fruit cheese wine honey "
    "every day brings new stories told by old friends sitting together under warm sun"
).split()

# The mock's tokenizer: a word or a single punctuation mark is one token. The tokenizer a load tool is given
# (eppkit.builds.inference_perf) is made from this rule and OUTPUT_WORDS, so both count alike.
TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A tokenizer stand-in: words and punctuation marks each count one token."""
    return len(TOKEN_RE.findall(text))


def prompt_tokens(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


VOCAB_SIZE = 32000


@functools.lru_cache(maxsize=1 << 16)
def token_id(token: str) -> int:
    """A token's id: a stable hash (no vocabulary file), the same in the mock's KV events and the pickers. Cached: a
    prompt repeats its words, and a 256 KiB one's 40,800 hashes took 25 ms of the sidecar's frontend (3 ms cached)."""
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "big") % VOCAB_SIZE


def prompt_text_of(body: dict[str, Any]) -> str:
    """The text the model would see: chat messages flattened, or the completion prompt.

    Any JSON is taken (what is not a message or a text is left out): the frontend tokenizes
    bodies before any worker has validated them.
    """
    if "messages" in body:
        messages = body["messages"] if isinstance(body["messages"], list) else []
        parts = []
        for message in messages:
            if isinstance(message, dict):
                parts.append(f"{message.get('role', '')}: {_content_text(message.get('content'))}")
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        return " ".join(p if isinstance(p, str) else " ".join(map(str, p)) if isinstance(p, list) else str(p) for p in prompt)
    return str(prompt)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(item.get("text") or "") for item in content if isinstance(item, dict) and item.get("type") == "text")
    return str(content)


def sequence_seed(seed: int, prompt: str) -> str:
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return f"{seed}:{digest}"


def output_tokens(seed: int, prompt: str, n: int) -> list[str]:
    """``n`` output tokens for (seed, prompt); the first has no leading space."""
    rng = random.Random(sequence_seed(seed, prompt))
    words = [rng.choice(OUTPUT_WORDS) for _ in range(n)]
    return [w if i == 0 else " " + w for i, w in enumerate(words)]
