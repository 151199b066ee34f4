"""Media items in an OpenAI chat request, and the hash that names each one.

Shared by the mock encoder (which writes one encoder-cache entry per item) and the
mock vLLM (which looks the same items up when it prefills). The hash covers the item's
type and payload only, so the same image sent to an encoder and then to a prefiller
gets the same name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MEDIA_TYPES = ("image_url", "audio_url", "input_audio")
# Items that carry a URL ({"url": ...} or the URL itself), which vLLM fetches or decodes.
URL_MEDIA_TYPES = ("image_url", "audio_url")


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


class MediaError(ValueError):
    """A media item no server could load; ``param`` is its place in the request."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def check_media(body: dict[str, Any]) -> None:
    """MediaError for the first URL item that is not an http(s) URL or a base64 data URL.

    vLLM refuses such an item (400) before anything runs; the message names the item as the
    sidecar's encoder errors do ("media item N (type)") and where it is in the request.
    """
    for index, item in enumerate(media_items(body)):
        if item.type not in URL_MEDIA_TYPES:
            continue
        payload = body["messages"][item.message_index]["content"][item.content_index].get(item.type)
        problem = _url_problem(payload)
        if problem:
            param = f"messages[{item.message_index}].content[{item.content_index}].{item.type}"
            raise MediaError(f"media item {index} ({item.type}) at {param}: {problem}", param)


def _url_problem(payload: Any) -> str | None:
    url = payload.get("url") if isinstance(payload, dict) else payload
    if not isinstance(url, str):
        return f"the URL must be a string, got {type(url).__name__ if url is not None else 'none'}"
    if url.startswith("data:"):
        meta, comma, data = url[5:].partition(",")
        if not comma or not meta.endswith(";base64"):
            return "the data URL must be data:<media type>;base64,<data>"
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return "the data URL is not valid base64"
        return None if decoded else "the data URL holds no data"
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return "not an http(s) URL or a data URL"


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
