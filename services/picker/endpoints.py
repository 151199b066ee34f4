"""One endpoint of a pool, and the one syntax every picker and the testbed use for a pool.

A pool is written ``[name=]host:port[@model[|model...]][#role],...``: the name is what the endpoint's
mock reports in ``x-inference-pod`` (default: the address), the models what it serves (default:
every model), the role its ``llm-d.ai/role`` in a disaggregated pool (:mod:`eppkit.services.picker.roles`;
default: none, a pod that serves whole requests). :func:`format_endpoints` writes what :func:`parse_endpoints` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from eppkit.services.openai_server.lora_info import LoraInfo
from eppkit.services.picker import roles


@dataclass
class PoolEndpoint:
    name: str
    host: str
    port: int
    models: tuple[str, ...] = ()  # empty: serves whatever model is asked for
    # Last scrape: None until the first one answered.
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None  # KV-cache usage, 0..1 (vllm:kv_cache_usage_perc)
    # Picks sent to this endpoint since the last scrape (not yet visible in its metrics).
    picked_since_scrape: int = 0
    healthy: bool = True
    last_scrape: float | None = None  # time.monotonic() of the last successful scrape
    last_error: str | None = None
    kv_events: str | None = None  # where it publishes its KV-cache events (tcp://host:port), when it does
    lora: LoraInfo | None = None  # its LoRA adapters at the last scrape (vllm:lora_requests_info), when it shows them
    role: str = ""  # its llm-d.ai/role in a disaggregated pool (prefill, decode, both); "": none given

    @property
    def address(self) -> str:
        """``host:port`` as Envoy's ORIGINAL_DST cluster reads it (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def serves(self, model: str | None) -> bool:
        return not self.models or model is None or model in self.models

    @property
    def queue_depth(self) -> float:
        """Requests this endpoint holds as far as the picker knows: waiting + running + unseen picks."""
        return (self.waiting or 0.0) + (self.running or 0.0) + self.picked_since_scrape

    def describe_load(self) -> str:
        if self.waiting is None and self.running is None:
            return f"no metrics, {self.picked_since_scrape} recent picks"
        return f"waiting={_fmt(self.waiting)} running={_fmt(self.running)} recent={self.picked_since_scrape}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def parse_endpoints(spec: str | Iterable[str]) -> list[PoolEndpoint]:
    """``"vllm-0=127.0.0.1:8001@mock-llm,127.0.0.1:8002"`` -> endpoints; ValueError on a bad item."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    endpoints: list[PoolEndpoint] = []
    seen: set[str] = set()
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, sep, address = item.partition("=")
        if not sep:
            name, address = "", item
        address, _, role = address.partition("#")
        address, _, models = address.partition("@")
        host, colon, port_text = address.strip().rpartition(":")
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"endpoint {item!r} is not [name=]host:port[@model][#role]")
        ep = PoolEndpoint(name=name.strip() or address.strip(), host=host.strip("[]"), port=int(port_text),
                          models=tuple(m.strip() for m in models.split("|") if m.strip()),
                          role=roles.check(role.strip()) if role.strip() else "")
        if ep.address in seen:
            raise ValueError(f"endpoint {ep.address} listed twice")
        seen.add(ep.address)
        endpoints.append(ep)
    return endpoints


class Named(Protocol):
    """What :func:`format_endpoints` needs of an endpoint (the testbed's ``Endpoint`` has it)."""

    name: str
    address: str


def format_endpoints(endpoints: Iterable[Named], *, models: bool = False) -> str:
    """The pool argument for :func:`parse_endpoints`: ``name=host:port[@model]`` per endpoint.

    ``models``: name each endpoint's model (``.model`` or ``.models``), so the picker chooses within
    the requested model (body routing); without it every endpoint serves every model.
    """
    def item(ep) -> str:
        served = ""
        if models:
            names = getattr(ep, "models", None) or (getattr(ep, "model", None),)
            served = "@" + "|".join(n for n in names if n)
        role = getattr(ep, "role", "")
        return f"{ep.name}={ep.address}{served}" + (f"#{role}" if role in (roles.PREFILL, roles.DECODE) else "")

    return ",".join(item(ep) for ep in endpoints)


def format_kv_events(endpoints: Iterable[Any]) -> str:
    """Where the endpoints that publish KV-cache events do (``.kv_events``), as :func:`parse_kv_events` reads it."""
    return ",".join(f"{ep.name}={ep.kv_events}" for ep in endpoints if getattr(ep, "kv_events", None))


def parse_kv_events(spec: str) -> dict[str, str]:
    """``"vllm-0=tcp://127.0.0.1:9100,..."`` -> {name: publisher URL}; ValueError on a bad item."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or "://" not in url:
            raise ValueError(f"--kv-events item {item!r} is not name=tcp://host:port")
        out[name.strip()] = url.strip()
    return out
