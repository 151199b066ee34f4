"""Media items in an OpenAI chat request, and the hash that names each one.

Shared by the mock encoder (which writes one encoder-cache entry per item) and the
mock vLLM (which looks the same items up when it prefills). The hash covers the item's
type and payload only, so the same image sent to an encoder and then to a prefiller
gets the same name.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

MEDIA_TYPES = ("image_url", "audio_url", "input_audio")


@dataclass(frozen=True)
class MediaItem:
    type: str  # image_url | audio_url | input_audio
    hash: str  # sha256 hex of the canonical (type, payload)
    size_bytes: int  # payload size (base64 data or URL length); the encoder's per-size latency uses it
    message_index: int
    content_index: int


def media_items(body: dict[str, Any]) -> list[MediaItem]:
    """Every media item in ``body["messages"]``, in order. Non-chat bodies have none."""
    items: list[MediaItem] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        return items
    for mi, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for ci, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in MEDIA_TYPES:
                continue
            kind = part["type"]
            payload = part.get(kind)
            items.append(
                MediaItem(
                    type=kind,
                    hash=item_hash(kind, payload),
                    size_bytes=_payload_size(payload),
                    message_index=mi,
                    content_index=ci,
                )
            )
    return items


def item_hash(kind: str, payload: Any) -> str:
    canonical = json.dumps({"type": kind, "payload": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _payload_size(payload: Any) -> int:
    if isinstance(payload, dict):
        for key in ("data", "url"):
            value = payload.get(key)
            if isinstance(value, str):
                return len(value)
    if isinstance(payload, str):
        return len(payload)
    return 0


def media_kind(item_type: str) -> str:
    """``image`` or ``audio``: the mm.type span attribute."""
    return "image" if item_type == "image_url" else "audio"
