"""The mock's ``GET /v1/models``, as vLLM lists its models: the served names, then each LoRA adapter (``--lora-modules``)
with ``root`` its path and ``parent`` the base model (vLLM's ``serving_models.show_available_models``)."""

from __future__ import annotations

import time
import uuid
from typing import Any


def model_list(served: list[str], max_model_len: int, adapters: dict[str, str]) -> dict[str, Any]:
    created = int(time.time())
    base = [{"id": name, "object": "model", "created": created, "owned_by": "eppkit", "root": name, "parent": None,
             "max_model_len": max_model_len, "permission": [_permission(created)]} for name in served]
    loras = [{"id": name, "object": "model", "created": created, "owned_by": "eppkit", "root": path,
              "parent": served[0], "max_model_len": None, "permission": [_permission(created)]}
             for name, path in adapters.items()]
    return {"object": "list", "data": base + loras}


def _permission(created: int) -> dict[str, Any]:
    """vLLM's model permission card (OpenAI's legacy one), as every entry of its /v1/models carries it."""
    return {"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission", "created": created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
            "group": None, "is_blocking": False}
