"""The two-phase multipart experiment: can the Go dynamic module run the two-phase multipart flow?

Run from the repo root:  python plugins/dynamic_module/experiments/multipart/run.py

It builds (or reuses) the experiment's own module (experiments/multipart/module, with only the
eppkit_multipart_probe filter: the kit's production module does not carry it), starts a stub
backend and an Envoy with two listeners (probe: eppkit_multipart_probe owns the upstream stream;
control: plain router), sends the same multipart request through each, and prints what the
backend saw:

  bytes_before_headers  request bytes the backend had received when it sent its response
                        headers (after a simulated prefill). Two-phase: part 1 only.
  part2_after_headers_ms  when the rest of the body arrived, relative to the headers.

With --vllm the backend is the kit's mock vLLM in its multipart mode (services/vllm): part 1
is the OpenAI request (request_payload), part 2 the metadata; the mock prefills on part 1,
writes headers and the first token, then waits for the metadata (span vllm.await_metadata)
and reports it in the response (multipart_metadata).

Everything binds 127.0.0.1; Envoy is stopped with SIGINT, then killed after 5 s.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, web

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO))

from eppkit.builds import dynmod as dynmod_build  # noqa: E402
from eppkit.components.launchers import ProcessLauncher  # noqa: E402
from eppkit.components.ports import PortAllocator  # noqa: E402
from eppkit.components.process import ServiceProcess  # noqa: E402
from eppkit.gateway import process as envoy_process

HERE = Path(__file__).resolve().parent
BOUNDARY = "eppkit-boundary"
MARKER = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"metadata\""
PREFILL_S = 0.3


def multipart_body() -> tuple[bytes, int]:
    part1 = (
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"request_payload\"\r\n"
        "Content-Type: application/json\r\n\r\n"
        + json.dumps({"model": "mock-llm", "prompt": "hello " * 200, "max_tokens": 4})
        + "\r\n"
    )
    part2 = (
        MARKER + "\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps({"kv_transfer_params": {"remote_block_ids": list(range(64))}})
        + f"\r\n--{BOUNDARY}--\r\n"
    )
    return (part1 + part2).encode(), len(part1.encode())


async def backend(request: web.Request) -> web.StreamResponse:
    t0 = time.monotonic()
    n1 = int(request.headers["x-probe-part1-len"])
    await request.content.readexactly(n1)
    t_part1 = time.monotonic()
    await asyncio.sleep(PREFILL_S)  # "prefill"
    before = request.content.total_bytes
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    t_headers = time.monotonic()
    await resp.write(b"data: {\"token\": \"first\"}\n\n")
    rest = await request.content.read()  # part 2 and the closing boundary, to end of stream
    t_rest = time.monotonic()
    stats = {
        "part1_bytes": n1,
        "bytes_before_headers": before,
        "rest_bytes": len(rest),
        "part1_received_ms": round((t_part1 - t0) * 1000, 1),
        "part2_after_headers_ms": round((t_rest - t_headers) * 1000, 1),
        "closing_boundary_seen": rest.endswith(f"--{BOUNDARY}--\r\n".encode()),
    }
    await resp.write(b"data: " + json.dumps(stats).encode() + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def send(port: int, body: bytes, n1: int, extra_headers: dict | None = None) -> dict:
    async with ClientSession(timeout=ClientTimeout(total=30)) as s:
        t0 = time.monotonic()
        async with s.post(
            f"http://127.0.0.1:{port}/v1/completions",
            data=body,
            headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}", "x-probe-part1-len": str(n1),
                     **(extra_headers or {})},
        ) as r:
            first = None
            chunks = []
            async for chunk in r.content.iter_any():
                first = first or time.monotonic()
                chunks.append(chunk)
            text = b"".join(chunks).decode()
            stats = json.loads([ln for ln in text.splitlines() if "part1_bytes" in ln][0][len("data: "):])
            return {
                "status": r.status,
                "client_ttft_ms": round((first - t0) * 1000, 1),
                "client_total_ms": round((time.monotonic() - t0) * 1000, 1),
                **stats,
            }


def vllm_body(stream: bool = False) -> tuple[bytes, str, str]:
    """(body, content type, split marker) for the mock vLLM's multipart mode."""
    from eppkit.services.vllm import multipart

    payload = json.dumps({"model": "mock-llm", "prompt": "hello " * 50, "max_tokens": 4, "stream": stream}).encode()
    metadata = json.dumps({"kv_transfer_params": {"remote_block_ids": [1, 2, 3]}}).encode()
    body = (multipart.encode_part(BOUNDARY, multipart.PAYLOAD_PART, payload, first=True)
            + multipart.encode_part(BOUNDARY, multipart.METADATA_PART, metadata)
            + multipart.closing(BOUNDARY))
    marker = f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="{multipart.METADATA_PART}"'
    return body, f"multipart/mixed; boundary={BOUNDARY}", marker


async def send_vllm_with(port: int, body: bytes, content_type: str, headers: dict) -> dict:
    async with ClientSession(timeout=ClientTimeout(total=30)) as s:
        t0 = time.monotonic()
        async with s.post(f"http://127.0.0.1:{port}/v1/completions", data=body,
                          headers={"content-type": content_type, **headers}) as r:
            first, chunks = None, []
            async for chunk in r.content.iter_any():
                first = first or time.monotonic()
                chunks.append(chunk)
            text = b"".join(chunks).decode()
            try:
                answer = json.loads(text)
            except ValueError:
                # SSE: the final chunk carries multipart_metadata
                events = [json.loads(ln[6:]) for ln in text.splitlines()
                          if ln.startswith("data: {")]
                answer = next((e for e in events if "multipart_metadata" in e or "error" in e), {"raw": text[:500]})
            return {
                "status": r.status,
                "served_by": r.headers.get("x-inference-pod"),
                "client_first_byte_ms": round((first - t0) * 1000, 1),
                "client_total_ms": round((time.monotonic() - t0) * 1000, 1),
                "multipart_metadata": answer.get("multipart_metadata", answer.get("error", answer)),
            }


async def main() -> int:
    lib = dynmod_build.build(package="./experiments/multipart/module", lib_name="libeppkit_multipart_probe.so")
    ports = PortAllocator()
    backend_port, probe_port, control_port, admin_port = (ports.port() for _ in range(4))
    use_vllm = "--vllm" in sys.argv[1:]
    vllm = None
    if use_vllm:
        vllm = ServiceProcess("eppkit.services.vllm", ["--instance", "vllm-0", "--time-to-first-token",
                                                       str(PREFILL_S * 1000), "--inter-token-latency", "5"],
                              port=backend_port).start()
        runner = None
    else:
        runner = web.AppRunner(web.Application())
        runner.app.router.add_post("/v1/completions", backend)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", backend_port).start()

    results = {}
    variants = [("headers", "backend"), ("first_data", "backend"), ("headers", "backend_picked")]
    for inject_after, cluster in variants:
        marker = vllm_body()[2] if use_vllm else MARKER
        probe_config = json.dumps({"cluster": cluster, "split_marker": marker, "inject_after": inject_after})
        name = f"probe (inject_after={inject_after}, cluster={cluster})"
        config = string.Template((HERE / "envoy.yaml.tmpl").read_text()).substitute(
            admin_port=admin_port, probe_port=probe_port, control_port=control_port,
            backend_port=backend_port, dynmod_path=lib, probe_config=probe_config.replace("'", "''"),
        )
        workdir = Path(tempfile.mkdtemp(prefix="eppkit-multipart-"))
        (workdir / "envoy.yaml").write_text(config)
        # Info level: the module logs its events ("eppkit_multipart_probe: ...") there.
        envoy = envoy_process.Envoy(workdir / "envoy.yaml", workdir / "envoy.log", admin_port,
                                    ProcessLauncher(envoy_process.find()), concurrency=1, log_level="info")
        # The in-process backend must keep serving while Envoy starts: wait in a thread.
        await asyncio.to_thread(envoy.start)
        try:
            picked = {"x-gateway-destination-endpoint": f"127.0.0.1:{backend_port}"}
            if use_vllm:
                # first_data needs a streamed first token: a non-streaming backend writes only
                # headers before the metadata, so waiting for body data would deadlock.
                body, content_type, _ = vllm_body(stream=inject_after == "first_data")
                headers = picked if cluster == "backend_picked" else {}
                results[name] = await send_vllm_with(probe_port, body, content_type, headers)
                if not any(k.startswith("control") for k in results):
                    results["control (plain router)"] = await send_vllm_with(control_port, body, content_type, {})
            else:
                body, n1 = multipart_body()
                results[name] = await send(probe_port, body, n1, picked if cluster == "backend_picked" else None)
                if not any(k.startswith("control") for k in results):
                    results["control (plain router)"] = await send(control_port, body, n1)
        finally:
            envoy.stop()  # SIGINT first so Envoy drains and exits on its own; killed only if it hangs
        events = [ln.split("eppkit_multipart_probe: ", 1)[1] for ln in (workdir / "envoy.log").read_text().splitlines()
                  if "eppkit_multipart_probe: part1" in ln]
        results[name]["module_events"] = events[-1] if events else None
        shutil.rmtree(workdir, ignore_errors=True)
    if runner is not None:
        await runner.cleanup()
    if vllm is not None:
        vllm.stop()
    print(json.dumps(results, indent=2))
    if use_vllm:
        ok = all(r["status"] == 200 and isinstance(r["multipart_metadata"], dict)
                 and r["multipart_metadata"].get("received") and "part2_sent_after" in (r.get("module_events") or "")
                 for k, r in results.items() if k.startswith("probe"))
    else:
        ok = all(
            r["bytes_before_headers"] == r["part1_bytes"] and r["closing_boundary_seen"] and r["status"] == 200
            for k, r in results.items() if k.startswith("probe")
        )
    print("two-phase observed on every probe run:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
