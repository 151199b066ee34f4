"""OpenAI request bodies in, a checked :class:`GenRequest` out; errors as OpenAIError.

Only what the mock acts on is checked, as vLLM 0.32.0 checks it: a body that is not JSON, or a field
missing or of the wrong type, is 400 of type ``Bad Request`` with ``param`` the field's place
(``body.messages``), as vLLM's request model (pydantic) refuses it; vLLM's own checks (max_tokens,
temperature, the context length) are 400 ``BadRequestError`` naming the parameter; a model not served is
404. A request without ``model`` is served by the first served model, as vLLM serves it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eppkit.services.openai_errors import VALIDATION, OpenAIError
from eppkit.services.openai_server import handshake, tokens
from eppkit.services.openai_server.media import MediaError, MediaItem, check_media, media_items

CHAT = "chat"
COMPLETION = "completion"


@dataclass
class GenRequest:
    kind: str  # chat | completion
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    seed: int | None
    prompt: str
    prompt_token_list: list[str]
    media: list[MediaItem] = field(default_factory=list)
    kv_transfer_params: dict[str, Any] | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_list)


def ms_header(headers, name: str) -> float | None:
    """A header of milliseconds (a test's override of a mock's time), or None; a 400 when it is not one."""
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise OpenAIError(400, f"{name} must be a number of milliseconds, got {raw!r}") from None
    if value < 0 or value != value:
        raise OpenAIError(400, f"{name} cannot be negative")
    return value


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OpenAIError(400, f"Invalid JSON in request body: {exc}", param="body", type=VALIDATION) from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "Request body must be a JSON object", param="body", type=VALIDATION)
    return body


def _type_error(name: str, expected: str) -> OpenAIError:
    return OpenAIError(400, f"'{name}' must be {expected}", param=f"body.{name}", type=VALIDATION)


def _missing(name: str) -> OpenAIError:
    return OpenAIError(400, f"'{name}' is a required property", param=f"body.{name}", type=VALIDATION)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_request(kind: str, body: dict[str, Any], served_models: list[str], max_model_len: int) -> GenRequest:
    model = body.get("model")
    if model is None:
        model = served_models[0]
    if not isinstance(model, str):
        raise _type_error("model", "a string")
    if model not in served_models:
        raise OpenAIError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")

    if kind == CHAT:
        _check_messages(body)
        try:
            check_media(body)
        except MediaError as exc:
            raise OpenAIError(400, str(exc), param=exc.param) from None
    else:
        _check_prompt(body)

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _type_error("stream", "a boolean")
    stream_options = body.get("stream_options")
    include_usage = False
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise _type_error("stream_options", "an object")
        iu = stream_options.get("include_usage", False)
        if iu is not None and not isinstance(iu, bool):
            raise _type_error("stream_options.include_usage", "a boolean")
        include_usage = bool(iu)

    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if not _is_int(max_tokens):
            raise _type_error("max_tokens", "an integer")
        if max_tokens < 1:
            raise OpenAIError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        if body.get(name) is not None and not _is_number(body[name]):
            raise _type_error(name, "a number")
    if body.get("temperature") is not None and body["temperature"] < 0:
        value = float(body["temperature"])
        raise OpenAIError(400, f"temperature must be non-negative, got {value}. (parameter=temperature, value={value})",
                          param="temperature")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise _type_error("seed", "an integer")
    n = body.get("n")
    if n is not None:
        if not _is_int(n):
            raise _type_error("n", "an integer")
        if n != 1:
            raise OpenAIError(400, "the mock serves n=1 only")

    params = body.get("kv_transfer_params")
    try:
        handshake.check_params(params)
    except handshake.HandshakeError as exc:
        raise OpenAIError(400, str(exc), param="kv_transfer_params") from None

    prompt = tokens.prompt_text_of(body)
    prompt_token_list = tokens.prompt_tokens(prompt)
    req = GenRequest(
        kind=kind,
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        seed=seed,
        prompt=prompt,
        prompt_token_list=prompt_token_list,
        media=media_items(body) if kind == CHAT else [],
        kv_transfer_params=params,
    )
    check_context_length(req.prompt_tokens, max_tokens or 0, max_model_len)
    return req


def check_context_length(prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    if prompt_tokens + max_tokens > max_model_len:
        raise context_length_error(prompt_tokens, max_tokens, max_model_len)


def context_length_error(prompt_tokens: int, max_tokens: int, max_model_len: int) -> OpenAIError:
    # vLLM's wording, so clients matching on it behave the same.
    return OpenAIError(
        400,
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
        f"completion). Please reduce the length of the messages or completion.",
        param="messages",
        code="context_length_exceeded",
    )


def _check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise _type_error("messages", "an array")
    if not messages:
        raise OpenAIError(400, "'messages' must contain at least one message", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _type_error(f"messages[{i}]", "an object")
        if not isinstance(message.get("role"), str):
            raise _type_error(f"messages[{i}].role", "a string")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _type_error(f"messages[{i}].content", "a string or an array of content parts")
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _type_error(f"messages[{i}].content[{j}]", "an object with a 'type'")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _type_error(f"messages[{i}].content[{j}].text", "a string")


def _check_prompt(body: dict[str, Any]) -> None:
    prompt = body.get("prompt")
    if prompt is None:
        raise OpenAIError(400, "Either prompt or prompt_embeds must be provided and non-empty.", param="prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt and all(
        isinstance(p, str) or (isinstance(p, list) and all(_is_int(t) for t in p)) or _is_int(p) for p in prompt
    ):
        return
    raise _type_error("prompt", "a string, an array of strings or an array of token ids")
