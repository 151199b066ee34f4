"""Servers you run, given by URL, as a backend: the kit starts none of them (only its pd-sidecar in front of each
decoder in pd and ttft) and asks each ``GET /v1/models`` before anything starts.

A URL is ``[name=]http://host:port[@model]``: ``name`` is what the picker calls it (default: the address; a server
that sends ``x-inference-pod`` should be named as it answers), ``model`` the model it serves (default: the first of
its ``GET /v1/models``).
"""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Iterable
from urllib.parse import urlsplit

import requests

from eppkit.backends.registry import BackendKind, FlowNeeds, register
from eppkit.observability.expected_spans import NONE
from eppkit.plan import Endpoint
from eppkit.services.picker.endpoints import parse_endpoints

NAME = "urls"
PROBE_TIMEOUT_S = 5.0


def parse_url(spec: str, *, role: str = "both", resolve: bool = True) -> Endpoint:
    """``[name=]http://host:port[@model]`` as an Endpoint; ValueError naming what is wrong.

    A host name is resolved to its IPv4 address (``resolve``): Envoy's pool cluster and the
    pickers' destination header take addresses. No model: empty (the testbed asks ``/v1/models``).
    """
    text = spec.strip()
    name, sep, url = text.partition("=")
    if not sep or "://" in name:
        name, url = "", text
    url, _, model = url.partition("@") if "://" in url else ("", "", "")
    if not url:
        raise ValueError(f"backend URL {spec!r} is not [name=]http://host:port[@model]")
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"backend URL {spec!r}: only http:// (Envoy's pool speaks plain HTTP/1.1 to it)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"backend URL {spec!r}: give only scheme, host and port (the request keeps its own path)")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"backend URL {spec!r} needs a host and a port: http://host:port")
    host = parts.hostname
    if resolve:
        try:
            host = socket.gethostbyname(host)
        except OSError as exc:
            raise ValueError(f"backend URL {spec!r}: cannot resolve {host}: {exc}") from None
    (parsed,) = parse_endpoints([f"{name.strip() + '=' if name.strip() else ''}{host}:{port}"])
    return Endpoint(parsed.name if name.strip() else f"{parts.hostname}:{port}", host, port, role, model.strip())


def served_models(ep: Endpoint, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The model ids ``GET /v1/models`` lists; ValueError saying why the server is not usable."""
    url = f"http://{ep.address}/v1/models"
    try:
        resp = requests.get(url, timeout=timeout_s)
        resp.raise_for_status()
        return [m["id"] for m in resp.json().get("data", []) if isinstance(m, dict) and m.get("id")]
    except (requests.RequestException, ValueError, AttributeError) as exc:
        raise ValueError(f"backend {ep.name} ({url}) does not answer as an OpenAI-compatible server: "
                         f"{type(exc).__name__}: {exc}") from None


def with_model(ep: Endpoint) -> Endpoint:
    """``ep`` with its model: the one its URL names, else the first its /v1/models lists."""
    listed = served_models(ep)
    if ep.model:
        return ep
    if not listed:
        raise ValueError(f"backend {ep.name} (http://{ep.address}) lists no model in /v1/models; "
                         "name it in the URL: http://host:port@model")
    return replace(ep, model=listed[0])


def check_seed(endpoints: Iterable[Endpoint], *, seed: int = 4242, tries: int = 2) -> None:
    """ValueError unless the same request with the same ``seed`` gets the same text from every endpoint.

    The ttft flow streams prefill's first token and then decode's rest: that is one coherent answer
    only when decode, given prefill's seed, repeats prefill's token. A server that ignores ``seed``
    (llm-d-inference-sim does) would garble the text; this refuses it before anything starts.
    """
    answers: list[tuple[str, str]] = []
    for ep in endpoints:
        for _ in range(tries):
            body = {"model": ep.model, "prompt": "eppkit seed probe: does the seed decide the text?",
                    "max_tokens": 4, "seed": seed, "temperature": 1.0, "stream": False}
            try:
                resp = requests.post(f"http://{ep.address}/v1/completions", json=body, timeout=PROBE_TIMEOUT_S * 6)
                resp.raise_for_status()
                text = resp.json()["choices"][0]["text"]
            except (requests.RequestException, ValueError, KeyError, IndexError, TypeError) as exc:
                raise ValueError(f"--flow ttft: cannot check that backend {ep.name} honours the request's seed "
                                 f"(POST /v1/completions: {type(exc).__name__}: {exc})") from None
            answers.append((ep.name, text))
    texts = {text for _, text in answers}
    if len(texts) > 1:
        seen = "; ".join(f"{name}: {text!r}" for name, text in answers)
        raise ValueError(
            "--flow ttft needs backends whose output follows the request's seed (the first token comes from "
            "prefill, the rest from decode, both given the same seed), but the same request with seed "
            f"{seed} got different answers ({seen}); the client's text would be garbled. Use --flow pd, a "
            "server that honours seed (vLLM does), or --backend llm-d-inference-sim (the kit makes its output "
            "deterministic).")


def _label(backend) -> str:
    n = len(backend.urls) or len(backend.prefill_urls) + len(backend.decode_urls)
    return f"external: {n} server(s) by URL"


def _validate(backend, flow: FlowNeeds) -> None:
    if backend.preset != "mock":
        raise ValueError(f"--backend {backend.preset} starts its own servers; it cannot be combined with backend URLs")
    for spec in (*backend.urls, *backend.prefill_urls, *backend.decode_urls):
        parse_url(spec, resolve=False)
    if flow.disaggregated:
        if backend.urls:
            raise ValueError(f"--flow {flow.name}: give --prefill-url and --decode-url (the kit's pd-sidecar goes in "
                             "front of each decoder), not --backend-url")
        if not backend.prefill_urls or not backend.decode_urls:
            raise ValueError(f"--flow {flow.name} needs at least one --prefill-url and one --decode-url")
    elif backend.prefill_urls or backend.decode_urls:
        raise ValueError(f"--prefill-url / --decode-url are for the pd and ttft flows (got --flow {flow.name}); "
                         "use --backend-url")


KIND = register(BackendKind(NAME, 30, "servers you run, by URL", NONE, _label, preset=False, validate=_validate))
