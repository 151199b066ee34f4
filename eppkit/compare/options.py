"""What one comparison runs (:class:`CompareOptions`, its defaults the `eppkit compare` flags') and the testbed
each mode gets for a scenario."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

from eppkit import flows, modes
from eppkit import options as opt
from eppkit.backends import Backend
from eppkit.builds import inference_perf
from eppkit.compare import admission, bodypaths, sweep
from eppkit.compare import loadmetrics as lm
from eppkit.modes import external_epp
from eppkit.modes.options import read_options
from eppkit.services.epp import BODY_PATHS
from eppkit.services.picker.settings import PickerSettings
from eppkit.services.vllm.config import MockLatency, latency_from_args
from eppkit.topology import Topology, VllmSpec
from eppkit.workload import SCENARIOS, Load, Scenario, concurrency_steps

EXIT_OK, EXIT_REGRESSION, EXIT_MODE_FAILED = 0, 1, 2
# Upper bounds that keep one run bounded whatever the flags say.
MAX_REQUESTS, MAX_CONCURRENCY, MAX_DURATION_S = 10_000, 256, 3600.0


def _default(name: str):
    """The option's one default (the options table's, command compare)."""
    return opt.default(name, opt.COMPARE)


@dataclass
class CompareOptions:
    """What one comparison runs; the defaults are the `eppkit compare` flags' (eppkit.options)."""

    modes: tuple[str, ...] = field(default_factory=lambda: _default("modes"))
    scenarios: tuple[str, ...] = _default("scenarios")
    # How many requests per mode and scenario, how fast, for how long (warmup: sent first, one at a time, uncounted).
    load: Load = field(default_factory=Load)
    seed: int = _default("seed")
    runtime: str = _default("runtime")
    backends: int = _default("backends")  # aggregated: vLLMs; pd / epd: decoders (one prefill, two encoders)
    latency: MockLatency = field(default_factory=MockLatency)  # every mock vLLM's knobs
    # What serves inference (eppkit.backends): the kit's mock, llm-d-inference-sim, or your servers.
    backend: Backend = field(default_factory=Backend)
    encode_latency: float = _default("encode_latency")
    # The same scorer in every picker mode, so differences between modes are the integrations'.
    scorer: str = _default("scorer")
    scorer_parameters: dict = field(default_factory=dict)
    stream: bool | None = None  # None: as the scenario says
    trace_timeout_s: float = 20.0  # per mode: how long to wait for traces to be complete
    # More options of one mode (e.g. external-epp's epp_command from --epp-command), by mode name.
    mode_sets: dict = field(default_factory=dict)
    charts: bool = True
    floors: bool = True  # each picker mode's floor beside it (eppkit.compare.floors)
    # How Envoy sends the request body to an ext_proc EPP: each mode that takes a path runs once per path
    # (eppkit.compare.bodypaths).
    body_paths: tuple[str, ...] = _default("body_paths")
    # Every run once per concurrency of this list, in place of load.concurrency (eppkit.compare.sweep); (): none.
    concurrency_sweep: tuple[int, ...] = ()
    # Bring your own plugin: the user's filters in every mode's chain, and the Envoy version (None: installed one).
    filters: tuple = ()
    envoy_version: str | None = None
    # What load tools report: goodput against this objective (eppkit.compare.loadmetrics), and a load tool
    # that sends each mode's requests once more, its figures set beside the kit's (eppkit.compare.loadtool).
    slo: str = _default("slo")
    load_tool: str = _default("load_tool")

    def validate(self) -> "CompareOptions":
        bad = [m for m in self.modes if m not in modes.names()]
        if bad:
            raise ValueError(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(modes.names())}")
        PickerSettings(scorer=self.scorer, scorer_parameters=self.scorer_parameters).validate()
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad:
            raise ValueError(f"unknown scenario(s) {', '.join(bad)}; choose from {', '.join(SCENARIOS)}")
        bad = [p for p in self.body_paths if p not in BODY_PATHS]
        if bad or not self.body_paths:
            raise ValueError(f"body path(s) {', '.join(bad) or 'none'}: choose from {', '.join(BODY_PATHS)}")
        if not self.modes or not self.scenarios:
            raise ValueError("need at least one mode and one scenario")
        load = self.load
        if not 1 <= load.requests <= MAX_REQUESTS:
            raise ValueError(f"--requests must be 1..{MAX_REQUESTS}")
        if not 1 <= load.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"--concurrency must be 1..{MAX_CONCURRENCY}")
        if self.concurrency_sweep:
            if concurrency_steps(self.concurrency_sweep)[-1] > MAX_CONCURRENCY:
                raise ValueError(f"--concurrency-sweep: each concurrency 1..{MAX_CONCURRENCY}")
        if not 0 < load.max_duration_s <= MAX_DURATION_S:
            raise ValueError(f"--max-duration must be in (0, {MAX_DURATION_S:g}] seconds")
        if load.rate < 0 or load.warmup < 0 or self.backends < 1:
            raise ValueError("--rate and --warmup cannot be negative; --backends must be at least 1")
        for name in self.scenarios:
            self.backend.validate(flows.get(SCENARIOS[name].flow))
        lm.Slo.parse(self.slo)
        if self.load_tool not in ("none", inference_perf.NAME):
            raise ValueError(f"--load-tool {self.load_tool}: choose none or {inference_perf.NAME}")
        return self


def mode_options(options: CompareOptions, mode: str) -> dict:
    """The options every mode runs with: the scorer, in each mode that has a picker."""
    scoring = {"scorer": options.scorer, "scorer_parameters": options.scorer_parameters}
    extra = dict(options.mode_sets.get(mode, {}))
    try:
        read_options(modes.get(mode).options, scoring, mode)
    except ValueError:  # a mode without a kit picker (direct, an EPP of your own)
        return extra
    return {**scoring, **extra}


def server_args(scenario: Scenario) -> list[str]:
    """What the scenario asks of every server it runs on (a long prompt's context window, a small KV cache, few
    requests at once)."""
    out = ["--max-model-len", str(scenario.max_model_len)] if scenario.max_model_len else []
    out += ["--max-num-seqs", str(scenario.max_num_seqs)] if scenario.max_num_seqs else []
    return out + (["--kv-cache-size", str(scenario.kv_cache_blocks)] if scenario.kv_cache_blocks else [])


class Run(NamedTuple):
    """One run of a scenario: its key among the scenario's results, and what it varies."""

    key: str
    mode: str
    path: str  # the body path (eppkit.compare.bodypaths)
    setting: str  # shedding or queueing (eppkit.compare.admission)
    concurrency: int | None  # a sweep's step (eppkit.compare.sweep), None outside one


def runs(options: CompareOptions, scenario: Scenario) -> list[Run]:
    """Every run ``scenario`` gets, in order: each mode, once per body path it takes (eppkit.compare.bodypaths), per
    setting it takes in a scenario of bands (eppkit.compare.admission), per concurrency of a sweep
    (eppkit.compare.sweep)."""
    out = []
    for mode in options.modes:
        mode_set = mode_options(options, mode)
        for path in options.body_paths:
            if not bodypaths.takes(mode, path, mode_set):
                continue
            for setting in admission.settings(scenario):
                if setting != admission.DEFAULT and not admission.takes(mode, setting, mode_set):
                    continue
                name = admission.key(bodypaths.key(mode, path), setting)
                out += [Run(sweep.key(name, c), mode, path, setting, c) for c in (options.concurrency_sweep or (None,))]
    return out


def at(options: CompareOptions, concurrency: int | None, scenario: Scenario | None = None) -> CompareOptions:
    """The options of one run: a sweep step's concurrency in the load's place; outside a sweep, the load's raised to
    what ``scenario`` keeps in flight per pod at least (Scenario.in_flight_per_pod, to saturate its pool)."""
    if concurrency is None:
        wanted = scenario.in_flight_per_pod * options.backends if scenario is not None else 0
        concurrency = min(MAX_CONCURRENCY, wanted) if wanted > options.load.concurrency else None
    return options if concurrency is None else replace(options, load=replace(options.load, concurrency=concurrency))


def topology_for(options: CompareOptions, mode: str, scenario: Scenario, body_path: str = bodypaths.DEFAULT,
                 setting: str = admission.DEFAULT) -> Topology:
    mode_set = admission.options_for(mode, scenario, setting, mode_options(options, mode),
                                     options.load.request_timeout_s)
    if body_path != bodypaths.DEFAULT:
        mode_set = {**mode_set, bodypaths.OPTION: body_path}
    return Topology(
        mode=mode, flow=scenario.flow,
        vllm=[VllmSpec(name=f"vllm-{i}", extra_args=server_args(scenario)) for i in range(options.backends)],
        prefill=1, decode=options.backends, encoders=2,
        latency=options.latency, encode_latency=options.encode_latency, seed=options.seed,
        options=mode_set, backend=options.backend,
        filters=list(options.filters), envoy_version=options.envoy_version,
    )


def options_from(args: argparse.Namespace) -> CompareOptions:
    """The compare options the command line gives (its flags: eppkit.options, command compare): each field from the
    flag of its name, and those that gather several flags (the latency knobs, the backend, an EPP of your own)."""
    given = {f.name: getattr(args, f.name) for f in fields(CompareOptions) if hasattr(args, f.name)}
    return CompareOptions(**{
        **given, "modes": tuple(args.modes), "scenarios": tuple(args.scenarios), "latency": latency_from_args(args),
        "load": Load(**{f.name: getattr(args, f.name) for f in fields(Load)}),
        "backend": opt.backend(args), "mode_sets": {external_epp.MODE.name: opt.epp_options(args)},
        "filters": tuple(args.filters or ()), "body_paths": tuple(args.body_paths),
        "concurrency_sweep": tuple(args.concurrency_sweep), "runtime": opt.runtime(args),
    })
