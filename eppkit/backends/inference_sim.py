"""llm-d-inference-sim as a testbed backend: its build, its dataset and its command line.

The simulator (github.com/llm-d/llm-d-inference-sim, Go) speaks vLLM's HTTP API, sets
``x-inference-pod`` from ``POD_NAME``, exposes vLLM's ``/metrics`` names and does the
``kv_transfer_params`` prefill/decode handshake. It emits no traces. It is built once from the
Go module proxy (:mod:`eppkit.builds.gotools`; ``eppkit bootstrap --backend llm-d-inference-sim``) and
started with the kit's latency knobs (:class:`~eppkit.services.vllm.config.MockLatency`, mapped to
its flags with ``ms`` units) and the mock's capacity defaults.

Two things differ from the mock and are handled here:

- **Output.** The simulator ignores the request's ``seed`` (it draws text from one process-wide
  RNG), so prefill and decode would disagree on the first token. It is always given a one-record
  dataset (:func:`dataset`): every answer is a prefix of the same text ``t0 t1 t2 ...`` cut to
  ``max_tokens``, the same on every instance and for every request. That keeps the ``ttft`` flow's
  text whole, and every answer exactly ``max_tokens`` long.
- **Addresses.** It always listens on every interface (``0.0.0.0``); there is no host flag. Its
  port is chosen free on all interfaces, not only on loopback (:meth:`PortAllocator.port`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import Callable

from eppkit.backends.registry import BackendKind, Server, register
from eppkit.builds import gotools
from eppkit.core.paths import cache_dir
from eppkit.observability.expected_spans import NONE
from eppkit.plan import ServiceSpec
from eppkit.services.vllm.config import MockLatency, VllmConfig, flag_name

NAME = "llm-d-inference-sim"
TOOL = gotools.GoTool(NAME, "github.com/llm-d/llm-d-inference-sim", "v0.10.2", "./cmd/llm-d-inference-sim")
# Readiness: it answers /v1/models only once its HTTP server runs (it exits, with status 0, on a fatal error).
READY_PATH = "/v1/models"
# Knobs of MockLatency the simulator has no flag for, and why that is fine.
UNSUPPORTED = {"ec_miss_latency": "the simulator has no encoder cache (the epd flow needs the kit's mock)"}
DATASET_TOKENS = 8192  # as long as the mock's context window: max_tokens never runs past it
_CAPACITY = VllmConfig()  # the mock's capacity defaults; the simulator's own are far smaller (5 running, 1024 tokens)


def find() -> Path | None:
    """The binary: $EPPKIT_LLM_D_INFERENCE_SIM, else the cached build, else None."""
    return gotools.find(TOOL)


def build(progress: Callable[[str], None] = print) -> Path:
    """The binary, built from the Go module proxy unless cached (minutes, once)."""
    return gotools.build(TOOL, progress)


MISSING = (f"{NAME} {TOOL.version} is not built. Run `eppkit bootstrap --backend {NAME}` "
           f"(builds it once from the Go module proxy; needs Go), or set {TOOL.env_var}.")


def require_binary() -> Path:
    found = find()
    if found is None:
        raise FileNotFoundError(MISSING)
    return found


def dataset(tokens: int = DATASET_TOKENS) -> Path:
    """A one-record sqlite dataset in the cache: the simulator answers every prompt with its text's prefix.

    No prompt hashes to the record's key, so the simulator falls back to it for every request and
    cuts it to ``max_tokens``. Written once (atomically), then reused.
    """
    path = cache_dir() / NAME / f"fixed-{tokens}.sqlite3"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    db = sqlite3.connect(partial)
    try:
        db.execute("CREATE TABLE llmd (id INTEGER PRIMARY KEY, prompt_hash BLOB NOT NULL, "
                   "gen_tokens JSON NOT NULL, n_gen_tokens INTEGER NOT NULL)")
        text = {"Tokens": list(range(1000, 1000 + tokens)), "Strings": [f"t{i} " for i in range(tokens)]}
        db.execute("INSERT INTO llmd (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)",
                   (b"\0" * 32, json.dumps(text), tokens))
        db.commit()
    finally:
        db.close()
    partial.rename(path)
    return path


def latency_flags(latency: MockLatency) -> list[str]:
    """Every latency knob as the simulator's flag, in its units (``100ms``; a factor bare).

    The simulator reads its per-token prefill model only when ``--time-to-first-token`` is 0, and
    its per-token KV transfer only when ``--kv-cache-transfer-latency`` is 0; the mock switches
    when the per-token knobs are set. Both are passed so the two behave alike.
    """
    values = {f.name: getattr(latency, f.name) for f in fields(MockLatency) if f.name not in UNSUPPORTED}
    if latency.prefill_overhead or latency.prefill_time_per_token:
        values["time_to_first_token"] = values["time_to_first_token_std_dev"] = 0.0
    if latency.kv_cache_transfer_time_per_token:
        values["kv_cache_transfer_latency"] = values["kv_cache_transfer_latency_std_dev"] = 0.0
    units = {f.name: f.metadata["metavar"] for f in fields(MockLatency)}
    return [item for name, value in values.items()
            for item in (f"--{flag_name(name)}", f"{value:g}ms" if units[name] == "MS" else f"{value:g}")]


def command(binary: Path | str, *, port: int, model: str, seed: int, latency: MockLatency,
            extra: list[str] = ()) -> list[str]:
    """The simulator's argv: the model, the latency knobs, the mock's capacity, the fixed dataset."""
    return [str(binary), "--port", str(port), "--model", model, "--seed", str(seed),
            "--force-dummy-tokenizer",  # never asks huggingface.co (offline, and no tokenizer service)
            *latency_flags(latency),
            "--max-num-seqs", str(_CAPACITY.max_num_seqs),
            "--max-waiting-queue-length", str(_CAPACITY.max_waiting_queue_length),
            "--max-model-len", str(_CAPACITY.max_model_len),
            "--block-size", str(_CAPACITY.block_size), "--kv-cache-size", str(_CAPACITY.kv_cache_size),
            # Read from the file, not --dataset-in-memory: its in-memory copy lives on one SQLite connection, and
            # concurrent requests open more, which see no table; the simulator then crashes (measured: 503s under load).
            "--dataset-path", str(dataset()), *map(str, extra)]


def env(name: str) -> dict[str, str]:
    """``POD_NAME``: the simulator answers with ``x-inference-pod: <name>``, as the mock does."""
    return {"POD_NAME": name}


def _server(s: Server) -> ServiceSpec:
    argv = command(require_binary(), port=s.port, model=s.model, seed=s.seed, latency=s.latency, extra=list(s.extra))
    return ServiceSpec(s.name, NAME, s.port, health_path=READY_PATH, env=env(s.name), argv=argv)


KIND = register(BackendKind(
    NAME, 10, "built once from the Go module proxy: `eppkit bootstrap --backend llm-d-inference-sim`", NONE,
    lambda _: f"external: {NAME} {TOOL.version} (started by the kit)", server=_server, all_interfaces=True,
    pod_addresses=f"{NAME} binds every interface", install=lambda progress: str(build(progress)), install_beside=True,
    require=lambda _: require_binary()))
