"""The requests the P/D sidecar derives from the client's, as vLLM's disaggregated proxies build them.

- one encoder request per media item: the item alone (text removed), ``max_tokens: 1``,
  not streamed (vLLM's ``disagg_epd_proxy``);
- the prefill request: ``kv_transfer_params.do_remote_decode: true``, ``max_tokens: 1``,
  not streamed (vLLM's NixlConnector proxy / llm-d's routing sidecar);
- the decode request: the client's body plus the prefiller's returned ``kv_transfer_params``.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from eppkit.services.openai_server.media import MediaItem, media_items


def encoder_requests(body: dict[str, Any]) -> list[tuple[MediaItem, dict[str, Any]]]:
    """One request per media item of the client's chat body, in order."""
    out = []
    messages = body.get("messages") or []
    for item in media_items(body):
        part = messages[item.message_index]["content"][item.content_index]
        out.append((item, {
            "model": body.get("model"),
            "messages": [{"role": messages[item.message_index].get("role", "user"), "content": [part]}],
            "max_tokens": 1,
            "stream": False,
        }))
    return out


def child_request_id(parent: str, index: int) -> str:
    """``<parent>:<index>:<short>`` as vLLM's EPD proxy names encoder requests."""
    return f"{parent}:{index}:{secrets.token_hex(4)}"


def prefill_request(body: dict[str, Any], seed: int) -> dict[str, Any]:
    req = copy.deepcopy(body)
    req.update({
        "max_tokens": 1,
        "stream": False,
        "seed": seed,
        "kv_transfer_params": {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        },
    })
    req.pop("stream_options", None)
    if "max_completion_tokens" in req:
        req["max_completion_tokens"] = 1
    return req


def decode_request(body: dict[str, Any], seed: int, kv_transfer_params: dict[str, Any] | None) -> dict[str, Any]:
    req = copy.deepcopy(body)
    req["seed"] = seed
    if kv_transfer_params:
        req["kv_transfer_params"] = kv_transfer_params
    return req


def request_seed(body: dict[str, Any]) -> int:
    """The client's seed, or one made here: prefill and decode must share it (first-token streaming)."""
    seed = body.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    return secrets.randbelow(2**31)
