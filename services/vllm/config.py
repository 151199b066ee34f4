"""The mock vLLM's configuration: one dataclass, one argparse front end, one validator.

Flag names are kebab-case and follow ``vllm serve`` and llm-d-inference-sim where
the two overlap (``--served-model-name``, ``--max-num-seqs``, ``--max-model-len``,
``--seed``, ``--time-to-first-token``, ``--inter-token-latency``,
``--kv-cache-transfer-latency``, ``--prefill-overhead``, ...). Every latency knob has a
``-std-dev`` jitter twin. All times on the command line are milliseconds; the dataclass
keeps them in milliseconds too, the latency model converts. The latency knobs are one dataclass,
:class:`MockLatency`, which the testbed, its CLI and ``eppkit compare`` share.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

from eppkit.core.flags import flag_field, flag_name, flag_of
from eppkit.services.openai_server.flags import ConfigError, check_common, check_jitter
from eppkit.services.vllm.failures import FAILURE_TYPES, normalize_failure_type
from eppkit.services.openai_server.kvevents import KvEventsConfig
from eppkit.services.vllm.lora import DEFAULT_MAX_LORAS, parse_modules

ROLES = ("prefill", "decode", "both")

__all__ = ["ConfigError", "MockLatency", "VllmConfig", "add_args", "flag_name", "from_args", "latency_from_args"]


def _knob(default: float, help: str, *, jitter_of: str | None = None, unit: str = "MS") -> Any:
    return flag_field(default, help, metavar=unit, jitter_of=jitter_of)


@dataclass
class MockLatency:
    """The mock vLLM's latency knobs, milliseconds (one definition).

    The mock's flags (``--<field with dashes>``), :class:`eppkit.Topology`'s ``latency``, the
    ``eppkit up / run / compare`` flags and the testbed's mock command lines are all made from
    these fields: a knob added here is settable everywhere. A ``jitter_of`` knob may be at most
    30% of its base.
    """

    time_to_first_token: float = _knob(100.0, "constant prefill time")
    time_to_first_token_std_dev: float = _knob(0.0, "jitter of --time-to-first-token", jitter_of="time_to_first_token")
    prefill_overhead: float = _knob(0.0, "per-token prefill model: fixed part (replaces --time-to-first-token when "
                                         "this or --prefill-time-per-token is set)")
    prefill_time_per_token: float = _knob(0.0, "per-token prefill model: time per uncached prompt token")
    prefill_time_std_dev: float = _knob(0.0, "jitter of the per-token prefill time (at most 30%% of the overhead "
                                             "plus one token)")
    inter_token_latency: float = _knob(10.0, "time between output tokens")
    inter_token_latency_std_dev: float = _knob(0.0, "jitter of --inter-token-latency", jitter_of="inter_token_latency")
    kv_cache_transfer_latency: float = _knob(20.0, "decode side of P/D: constant KV-transfer time")
    kv_cache_transfer_latency_std_dev: float = _knob(0.0, "jitter of --kv-cache-transfer-latency",
                                                     jitter_of="kv_cache_transfer_latency")
    kv_cache_transfer_time_per_token: float = _knob(0.0, "decode side: KV-transfer time per prompt token (replaces "
                                                         "the constant when set)")
    kv_cache_transfer_time_std_dev: float = _knob(0.0, "jitter of the per-token KV-transfer time",
                                                  jitter_of="kv_cache_transfer_time_per_token")
    ec_miss_latency: float = _knob(0.0, "extra prefill time per media item not found in the encoder cache")
    time_factor_under_load: float = _knob(1.0, "latency multiplier reached at --max-num-seqs running requests, "
                                               "1.0 at one", unit="FACTOR")

    def args(self) -> list[str]:
        """The mock's flags for the knobs that differ from the defaults."""
        default = MockLatency()
        return [item for f in fields(MockLatency) if getattr(self, f.name) != getattr(default, f.name)
                for item in (f"--{flag_name(f.name)}", f"{getattr(self, f.name):g}")]

    def validate_latency(self) -> None:
        for f in fields(MockLatency):
            base = f.metadata["jitter_of"]
            if base is not None:
                check_jitter(base, getattr(self, base), f.name, getattr(self, f.name))
        # prefill-time-std-dev is the jitter of the whole per-token prefill time; bound it by
        # the overhead plus one token (the smallest prefill that model can produce).
        check_jitter("prefill_overhead", self.prefill_overhead + self.prefill_time_per_token,
                      "prefill_time_std_dev", self.prefill_time_std_dev)
        if self.time_factor_under_load < 1.0:
            raise ConfigError(f"--time-factor-under-load must be >= 1.0 (got {self.time_factor_under_load})")


def add_latency_args(group, defaults: MockLatency | None = None) -> None:
    """One flag per :class:`MockLatency` knob (``--time-to-first-token MS`` ...) on ``group``."""
    d = defaults or MockLatency()
    for f in fields(MockLatency):
        group.add_argument(flag_of(f), dest=f.name, type=float, default=getattr(d, f.name),
                           metavar=f.metadata["metavar"], help=f"{f.metadata['help']} (default: %(default)s)")


def latency_from_args(args: argparse.Namespace) -> MockLatency:
    return MockLatency(**{f.name: getattr(args, f.name) for f in fields(MockLatency)})


@dataclass
class VllmConfig(MockLatency):
    role: str = "both"
    instance: str = "vllm-0"
    served_model_names: list[str] = field(default_factory=lambda: ["mock-llm"])
    seed: int = 0
    # capacity
    max_num_seqs: int = 1024
    max_waiting_queue_length: int = 10000
    max_model_len: int = 8192
    default_max_tokens: int = 16
    block_size: int = 16
    kv_cache_size: int = 16384  # blocks
    kv_events_config: str | None = None  # vLLM's --kv-events-config JSON (services/openai_server/kvevents.py); None: no events
    # LoRA adapters (services/vllm/lora.py): vLLM's --lora-modules items and --max-loras
    lora_modules: list[str] = field(default_factory=list)
    max_loras: int = DEFAULT_MAX_LORAS
    max_body_bytes: int = 8 * 1024 * 1024
    # multipart (two-phase) mode
    multipart_metadata_timeout: float = 10000.0
    # encoder cache shared with the mock encoder; None: no media lookups
    ec_cache_dir: str | None = None
    # failure injection
    failure_injection_rate: float = 0.0  # percent, 0..100
    failure_types: list[str] = field(default_factory=lambda: list(FAILURE_TYPES))
    failure_after_tokens: int = 1
    stall_timeout: float = 600000.0
    # KV-transfer parameters this instance hands out as a prefiller
    kv_host: str = "127.0.0.1"
    kv_port: int = 5600

    @property
    def model(self) -> str:
        return self.served_model_names[0]

    def validate(self) -> "VllmConfig":
        if self.role not in ROLES:
            raise ConfigError(f"--role must be one of {', '.join(ROLES)}, got {self.role!r}")
        check_common(self)
        self.validate_latency()
        if self.failure_injection_rate > 100:
            raise ConfigError(f"--failure-injection-rate is a percentage, 0..100 (got {self.failure_injection_rate})")
        if self.max_num_seqs < 1:
            raise ConfigError("--max-num-seqs must be at least 1")
        if self.block_size < 1 or self.kv_cache_size < 1:
            raise ConfigError("--block-size and --kv-cache-size must be at least 1")
        if self.max_model_len < 1:
            raise ConfigError("--max-model-len must be at least 1")
        if self.max_loras < 1:
            raise ConfigError("--max-loras must be at least 1")
        try:
            adapters = parse_modules(self.lora_modules)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        clash = sorted(set(adapters) & set(self.served_model_names))
        if clash:
            raise ConfigError(f"--lora-modules: {clash[0]!r} is also a served model name")
        try:
            KvEventsConfig.parse(self.kv_events_config)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        normalized = []
        for t in self.failure_types:
            try:
                normalized.append(normalize_failure_type(t))
            except ValueError as exc:
                raise ConfigError(f"--failure-types: {exc}") from None
        self.failure_types = normalized
        return self


def add_args(parser: argparse.ArgumentParser) -> None:
    """The mock's own flags (the common ones come from services.runner)."""
    d = VllmConfig()
    g = parser.add_argument_group("identity")
    g.add_argument("--role", choices=ROLES, default=d.role, help="prefill | decode | both (default: %(default)s)")
    g.add_argument("--instance", default=d.instance, help="instance name, reported in x-inference-pod and spans")
    g.add_argument(
        "--served-model-name",
        dest="served_model_names",
        action="append",
        default=None,
        help='model name served (repeatable; default: "mock-llm")',
    )
    g.add_argument("--seed", type=int, default=d.seed, help="seed for tokens, jitter and failures")

    add_latency_args(parser.add_argument_group("latency model (milliseconds)"))

    g = parser.add_argument_group("capacity")
    g.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs, help="requests running at once (default: %(default)s)")
    g.add_argument("--max-waiting-queue-length", type=int, default=d.max_waiting_queue_length, help="requests allowed to wait; beyond: 429 (default: %(default)s)")
    g.add_argument("--max-model-len", type=int, default=d.max_model_len, help="context window in tokens (default: %(default)s)")
    g.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens, help="output length when the request sets none (default: %(default)s)")
    g.add_argument("--block-size", type=int, default=d.block_size, help="KV-cache block size in tokens (default: %(default)s)")
    g.add_argument("--kv-cache-size", type=int, default=d.kv_cache_size, help="KV-cache capacity in blocks (default: %(default)s)")
    g.add_argument("--kv-events-config", default=None, metavar="JSON",
                   help='vLLM\'s KV-cache events: {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": '
                   '"tcp://127.0.0.1:5557", "replay_endpoint": ..., "topic": ..., "event_format": "named"|"positional"} '
                   '(default: none)')
    g.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME=PATH",
                   help="LoRA adapters served as models of their own, as vLLM's flag (the path is not read; default: "
                   "none)")
    g.add_argument("--max-loras", type=int, default=d.max_loras,
                   help="adapters loaded at once; others load on demand in place of the least recently used idle "
                   "one (default: %(default)s)")
    g.add_argument("--enable-lora", action="store_true", help="accepted as vLLM's; adapters are served without it")
    g.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="largest request body accepted; beyond: 413 (default: %(default)s)")

    g = parser.add_argument_group("multipart mode and encoder cache")
    g.add_argument("--multipart-metadata-timeout", type=float, default=d.multipart_metadata_timeout, metavar="MS", help="how long to wait for the metadata part after prefill (default: %(default)s)")
    g.add_argument("--ec-cache-dir", default=None, help="encoder-cache directory shared with the mock encoder (default: none)")
    g.add_argument("--kv-host", default=d.kv_host, help="remote_host this instance reports as a prefiller (default: %(default)s)")
    g.add_argument("--kv-port", type=int, default=d.kv_port, help="remote_port this instance reports as a prefiller (default: %(default)s)")

    g = parser.add_argument_group("failure injection")
    g.add_argument("--failure-injection-rate", type=float, default=d.failure_injection_rate, help="percentage of requests that fail (default: %(default)s)")
    g.add_argument(
        "--failure-types",
        nargs="+",
        default=list(FAILURE_TYPES),
        help=f"failure types drawn from (default: all of {' '.join(FAILURE_TYPES)})",
    )
    g.add_argument("--failure-after-tokens", type=int, default=d.failure_after_tokens, help="tokens sent before a stall or disconnect (default: %(default)s)")
    g.add_argument("--stall-timeout", type=float, default=d.stall_timeout, metavar="MS", help="how long a stalled request hangs before it is dropped (default: %(default)s)")


def from_args(args: argparse.Namespace) -> VllmConfig:
    kwargs = {}
    for f in fields(VllmConfig):
        if hasattr(args, f.name):
            value = getattr(args, f.name)
            if value is not None:
                kwargs[f.name] = value
    return VllmConfig(**kwargs).validate()
