"""OpenAI-style error responses, shared by every HTTP service of the kit.

The body shape follows the OpenAI API (and vLLM's ``ErrorResponse``):
``{"error": {"message", "type", "param", "code"}}``; a mock may add fields of its own beside ``error``
(``extra``: what it received, when a test asks).
"""

from __future__ import annotations

import json

from aiohttp import web

# OpenAI's error type by HTTP status; the dynamic module's Go filter has the same table (errors.go, a unit test
# holds the two together).
_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    408: "TimeoutError",
    413: "BadRequestError",
    415: "BadRequestError",
    422: "BadRequestError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "TimeoutError",
}


# vLLM's type for a body its request model (pydantic) refuses: not JSON, a field missing or of the wrong type.
VALIDATION = "Bad Request"


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None,
               type: str | None = None, extra: dict | None = None) -> dict:
    return {
        "error": {
            "message": message,
            "type": type or _TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError"),
            "param": param,
            "code": code if code is not None else status,
        },
        **(extra or {}),
    }


def upstream_message(text: str, limit: int = 300) -> str:
    """The message inside an upstream's OpenAI-style error body, else the body itself, shortened.

    A gateway that relays an upstream failure names the upstream in its own message; nesting
    the upstream's whole JSON inside that string would make clients parse an error twice.
    """
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message if message else text.strip())[:limit]


def error_response(
    status: int, message: str, *, param: str | None = None, code: str | None = None, headers=None,
    type: str | None = None, extra: dict | None = None,
) -> web.Response:
    # "application/json" as vLLM (FastAPI) sends it, without aiohttp's "; charset=utf-8"
    body = json.dumps(error_body(status, message, param=param, code=code, type=type, extra=extra)).encode()
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


class OpenAIError(Exception):
    """Raise from a handler to answer with an OpenAI-style error."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type  # None: the status's (BadRequestError, NotFoundError, ...)

    def response(self, headers=None, extra: dict | None = None) -> web.Response:
        """The error as an answer; ``extra``: top-level fields beside its ``error``."""
        return error_response(self.status, self.message, param=self.param, code=self.code, headers=headers,
                              type=self.type, extra=extra)


@web.middleware
async def openai_error_middleware(request: web.Request, handler):
    """Turn every failure into OpenAI-style JSON so no client ever sees an HTML page."""
    try:
        return await handler(request)
    except OpenAIError as exc:
        return exc.response()
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(413, f"request body too large: {exc.text}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason or exc.text or "error")
