"""The vLLM NixlConnector handshake between a prefill and a decode instance.

As in vLLM's disaggregated serving (and the llm-d routing sidecar):

1. The proxy sends the request to the prefiller with
   ``kv_transfer_params = {"do_remote_decode": true, "do_remote_prefill": false, ...}``.
   The prefiller runs prefill only and answers one token plus ``kv_transfer_params``
   saying where the KV blocks are: ``remote_engine_id``, ``remote_block_ids``,
   ``remote_host``, ``remote_port`` (and ``do_remote_prefill: true``, ``tp_size``).
2. The proxy sends the request to the decoder with those params. The decoder "pulls" the
   blocks (waits the KV-transfer time) instead of prefilling, then decodes.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any


class HandshakeError(ValueError):
    """kv_transfer_params the mock cannot act on; the message names the field."""


def engine_id(instance: str) -> str:
    """A stable engine id per instance, so traces and tests can match P to D."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"eppkit-vllm/{instance}"))


def wants_remote_decode(params: Any) -> bool:
    """A prefill-only request: prefill, answer one token and the KV location."""
    return isinstance(params, dict) and params.get("do_remote_decode") is True


def has_remote_prefill(params: Any) -> bool:
    """A decode request whose KV blocks were prefilled elsewhere."""
    return isinstance(params, dict) and params.get("do_remote_prefill") is True


def check_params(params: Any) -> None:
    """Raise HandshakeError for kv_transfer_params of the wrong shape."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise HandshakeError("kv_transfer_params must be an object")
    for key in ("do_remote_decode", "do_remote_prefill"):
        if key in params and params[key] is not None and not isinstance(params[key], bool):
            raise HandshakeError(f"kv_transfer_params.{key} must be a boolean")
    if params.get("do_remote_decode") is True and params.get("do_remote_prefill") is True:
        raise HandshakeError("kv_transfer_params cannot ask for both do_remote_decode and do_remote_prefill")
    if has_remote_prefill(params):
        missing = [k for k in ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port") if params.get(k) is None]
        if missing:
            raise HandshakeError(f"kv_transfer_params with do_remote_prefill lacks {', '.join(missing)}")
        if not isinstance(params["remote_block_ids"], list):
            raise HandshakeError("kv_transfer_params.remote_block_ids must be a list")
        if not isinstance(params["remote_port"], int) or isinstance(params["remote_port"], bool):
            raise HandshakeError("kv_transfer_params.remote_port must be an integer")


def block_ids(request_id: str, prompt_tokens: int, block_size: int) -> list[int]:
    """Deterministic block ids for a prompt: one per (partly) filled block."""
    n = max(1, -(-prompt_tokens // block_size))
    base = int.from_bytes(hashlib.sha256(request_id.encode()).digest()[:3], "big")
    return [base + i for i in range(n)]


def prefill_response_params(
    *, instance: str, request_id: str, prompt_tokens: int, block_size: int, host: str, port: int
) -> dict[str, Any]:
    """What the prefiller returns for the decoder."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": block_ids(request_id, prompt_tokens, block_size),
        "remote_engine_id": engine_id(instance),
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
    }
