"""python -m echo_server --port P --name POD [--host H] [--model M]: serve until SIGINT."""

import argparse
import json
import time

from aiohttp import web


def app(name: str, model: str) -> web.Application:
    headers = {"x-inference-pod": name}

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]}, headers=headers)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = " ".join(reversed(str(body["messages"][-1]["content"]).split()))
        if not body.get("stream"):
            return web.json_response({
                "id": "chatcmpl-echo", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": len(text.split()), "total_tokens": len(text.split())},
            }, headers=headers)
        response = web.StreamResponse(headers={**headers, "content-type": "text/event-stream"})
        await response.prepare(request)
        for word in text.split():
            chunk = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": model, "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_get("/v1/models", models)
    application.router.add_post("/v1/chat/completions", chat)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m echo_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True, help="the pod's name, sent as x-inference-pod")
    parser.add_argument("--model", default="mock-llm")
    args = parser.parse_args()
    web.run_app(app(args.name, args.model), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
