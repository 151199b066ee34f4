"""The mock encoder's flags: identity, encode latency (per item, per size), the cache dir."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields

from eppkit.services.openai_server.flags import ConfigError, check_common, check_jitter

__all__ = ["ConfigError", "EncoderConfig", "add_args", "from_args"]


@dataclass
class EncoderConfig:
    instance: str = "encoder-0"
    served_model_names: list[str] = field(default_factory=lambda: ["mock-llm"])
    seed: int = 0
    encode_latency: float = 50.0  # ms per item
    encode_latency_std_dev: float = 0.0
    encode_time_per_kb: float = 0.0  # ms per KiB of item payload (base64 data or URL)
    ec_cache_dir: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024

    @property
    def model(self) -> str:
        return self.served_model_names[0]

    def validate(self) -> "EncoderConfig":
        check_common(self)
        check_jitter("encode_latency", self.encode_latency, "encode_latency_std_dev", self.encode_latency_std_dev)
        return self


def add_args(parser: argparse.ArgumentParser) -> None:
    d = EncoderConfig()
    parser.add_argument("--instance", default=d.instance, help="instance name, reported in x-inference-pod and spans")
    parser.add_argument("--served-model-name", dest="served_model_names", action="append", default=None, help='model name served (repeatable; default: "mock-llm")')
    parser.add_argument("--seed", type=int, default=d.seed, help="seed for latency jitter (default: %(default)s)")
    parser.add_argument("--encode-latency", type=float, default=d.encode_latency, metavar="MS", help="encode time per media item (default: %(default)s)")
    parser.add_argument("--encode-latency-std-dev", type=float, default=d.encode_latency_std_dev, metavar="MS", help="jitter of --encode-latency (default: %(default)s)")
    parser.add_argument("--encode-time-per-kb", type=float, default=d.encode_time_per_kb, metavar="MS", help="extra encode time per KiB of an item's payload (default: %(default)s)")
    parser.add_argument("--ec-cache-dir", default=None, help="encoder-cache directory shared with P/PD mocks (default: none, nothing written)")
    parser.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="largest request body accepted (default: %(default)s)")


def from_args(args: argparse.Namespace) -> EncoderConfig:
    kwargs = {f.name: getattr(args, f.name) for f in fields(EncoderConfig) if getattr(args, f.name, None) is not None}
    return EncoderConfig(**kwargs).validate()
