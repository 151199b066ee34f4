"""The pickers' settings and their defaults, in one place: every transport's command line and the
testbed's mode options are built from :class:`PickerSettings`.

- :func:`add_arguments` puts the pool and settings flags on a transport's parser;
- :func:`build` turns the parsed flags into a :class:`~eppkit.services.picker.core.Picker` and
  the scrapers of its pools;
- :func:`service_args` is the reverse, for the testbed: the flags that start a transport with
  given settings and pools (every picker mode builds its services' flags through it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

from eppkit.services.picker import roles, scorers
from eppkit.services.picker.core import Picker
from eppkit.services.picker import flow_control as fc
from eppkit.services.picker.endpoints import Named, format_endpoints, format_kv_events, parse_endpoints, parse_kv_events
from eppkit.services.picker.kube_pool import DEFAULT_GROUP, VERSIONS, KubePool
from eppkit.services.picker.pool import RUNNING_METRIC, WAITING_METRIC, Pool
from eppkit.services.picker.saturation import KV_CACHE_UTIL_THRESHOLD, QUEUE_DEPTH_THRESHOLD, KubeObjectives, Saturation
from eppkit.services.picker.scraper import MetricsScraper
from eppkit.services.picker.stages import StagePicker


@dataclass
class PickerSettings:
    # The scorer type (services/picker/scorers) and its raw parameters, as GAIE configures a plugin.
    scorer: str = "queue-scorer"
    scorer_parameters: dict[str, Any] = field(default_factory=dict)
    # Seconds between /metrics scrapes of every endpoint; 0 turns scraping (and health) off.
    metrics_interval: float = 0.2
    # Answer 429 when every healthy endpoint's waiting queue is at least this; 0 never sheds.
    shed_queue_threshold: float = 0
    # Fallback endpoints a decision lists after the primary.
    max_fallbacks: int = 2
    # The pool is saturated (a sheddable request, its InferenceObjective's priority negative, gets 429) when the mean
    # over its endpoints of max(waiting / queue_depth_threshold, KV-cache usage / kv_cache_util_threshold) is 1 or
    # more: GAIE's utilization detector and its defaults (services/picker/saturation.py); 0: that ratio not read.
    queue_depth_threshold: float = QUEUE_DEPTH_THRESHOLD
    kv_cache_util_threshold: float = KV_CACHE_UTIL_THRESHOLD
    # The load the scorers read from each endpoint's /metrics (vLLM's names; another server may name them
    # otherwise): requests waiting in its queue, and requests running.
    waiting_metric: str = WAITING_METRIC
    running_metric: str = RUNNING_METRIC
    # Flow control (llm-d-router's flowControl feature gate, services/picker/flow_control.py): while the pool is
    # saturated requests wait in the picker by priority band and fairness id instead of being sent on or shed; a
    # request waits at most default_request_ttl seconds (then 429, or 503 with no endpoint up), a band holds at most
    # priority_band_max_requests; within a band the fairness policy (round-robin or global-strict) takes turns.
    flow_control: bool = False
    default_request_ttl: float = fc.DEFAULT_REQUEST_TTL_S
    priority_band_max_requests: int = fc.PRIORITY_BAND_MAX_REQUESTS
    fairness_policy: str = fc.ROUND_ROBIN

    def flow(self) -> dict | None:
        """Flow control's settings as the picker takes them (None: off)."""
        if not self.flow_control:
            return None
        return {"ttl_s": self.default_request_ttl, "max_per_band": self.priority_band_max_requests,
                "policy": self.fairness_policy}

    def validate(self) -> "PickerSettings":
        if min(self.metrics_interval, self.shed_queue_threshold, self.max_fallbacks, self.queue_depth_threshold,
               self.kv_cache_util_threshold) < 0:
            raise ValueError("metrics_interval, shed_queue_threshold, max_fallbacks, queue_depth_threshold and "
                             "kv_cache_util_threshold cannot be negative")
        if self.kv_cache_util_threshold > 1:
            raise ValueError(f"kv_cache_util_threshold is a share of the KV cache, 0..1 (got "
                             f"{self.kv_cache_util_threshold:g})")
        if not self.waiting_metric.strip() or not self.running_metric.strip():
            raise ValueError("waiting_metric and running_metric name Prometheus metrics; they cannot be empty")
        scorers.create(self.scorer, self.scorer_parameters)  # an unknown type or parameter fails here
        if self.default_request_ttl <= 0 or self.priority_band_max_requests < 1:
            raise ValueError("default_request_ttl must be more than 0 seconds and priority_band_max_requests 1 or more")
        if self.fairness_policy not in fc.FAIRNESS_POLICIES:
            raise ValueError(f"fairness_policy {self.fairness_policy!r}: one of {', '.join(fc.FAIRNESS_POLICIES)}")
        return self


DEFAULTS = PickerSettings()


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def add_arguments(parser: argparse.ArgumentParser, *, stages: bool = True) -> None:
    """The pool flags and :class:`PickerSettings` flags (``stages``: also the prefill / encoder pools)."""
    g = parser.add_argument_group("pool and scoring")
    g.add_argument("--endpoints", default="",
                   help="the pool: comma-separated [name=]host:port[@model[|model]] (no model: serves every "
                        "model). Empty: every request gets 503.")
    if stages:
        g.add_argument("--prefill-endpoints", default="",
                       help="disaggregated flows: prefillers ([name=]host:port,...); each decision also names one "
                            "(x-prefiller-host-port), chosen by a scorer of --scorer's type")
        g.add_argument("--encoder-endpoints", default="",
                       help="disaggregated flows: encoders ([name=]host:port,...); a request with media also gets "
                            "x-encoder-hosts-ports (one encoder per item at most, rotating)")
    g.add_argument("--pod-roles", default="",
                   help="each pod's llm-d.ai/role (prefill, decode, both), ip:port=role,... (an EPP command's "
                        "{pod_roles}); a prefill-only pod is never a destination. Also written in --endpoints as #role")
    g.add_argument("--kv-events", default="",
                   help="where the pool's endpoints publish their KV-cache events: name=tcp://host:port,... (the "
                        "kv-events-scorer subscribes; vLLM's --kv-events-config endpoint) (default: none)")
    k = parser.add_argument_group("the pool from Kubernetes (instead of --endpoints; the GAIE EPP's flag names)")
    k.add_argument("--pool-name", default="",
                   help="learn the pool from this InferencePool (inference.networking.k8s.io/v1) and the Ready pods it "
                        "selects, kept up to date by a watch")
    k.add_argument("--pool-namespace", default="default", help="its namespace (default: %(default)s)")
    k.add_argument("--pool-group", default=DEFAULT_GROUP, choices=sorted(VERSIONS),
                   help="its API group (default: %(default)s; inference.networking.x-k8s.io: v1alpha2 pools)")
    k.add_argument("--kubeconfig", default="",
                   help="the cluster's kubeconfig (default: $KUBECONFIG)")
    g.add_argument("--scorer", choices=scorers.types(), default=DEFAULTS.scorer, help="scorer type (default: %(default)s)")
    g.add_argument("--scorer-parameters", type=_json_object, default={}, metavar="JSON",
                   help="the scorer's parameters as a JSON object, e.g. '{\"hashBlockSize\": 32}' (default: none)")
    g.add_argument("--metrics-interval", type=float, default=DEFAULTS.metrics_interval,
                   help="seconds between /metrics scrapes of every endpoint; 0 turns scraping (and health) off "
                        "(default: %(default)s)")
    g.add_argument("--shed-queue-threshold", type=float, default=DEFAULTS.shed_queue_threshold,
                   help="answer 429 when every healthy endpoint's waiting queue (vllm:num_requests_waiting at the "
                        "last scrape) is at least this; 0 never sheds (default: %(default)s)")
    g.add_argument("--queue-depth-threshold", type=float, default=DEFAULTS.queue_depth_threshold,
                   help="saturation: an endpoint's waiting queue this deep is full; a request whose InferenceObjective "
                        "has a negative priority gets 429 while the pool is saturated (GAIE's utilization detector: "
                        "the mean over the endpoints of max(waiting / this, KV-cache usage / --kv-cache-util-threshold) "
                        "at 1 or more); 0: not read (default: %(default)s, GAIE's)")
    g.add_argument("--kv-cache-util-threshold", type=float, default=DEFAULTS.kv_cache_util_threshold,
                   help="saturation: an endpoint's KV-cache usage (vllm:kv_cache_usage_perc, 0..1) this high is full; "
                        "0: not read (default: %(default)s, GAIE's)")
    g.add_argument("--max-fallbacks", type=int, default=DEFAULTS.max_fallbacks,
                   help="fallback endpoints a decision lists after the primary (default: %(default)s)")
    f = parser.add_argument_group("flow control (llm-d-router's flowControl feature gate; off by default)")
    f.add_argument("--flow-control", action="store_true",
                   help="while the pool is saturated, requests wait in the picker (by priority band, then fairness "
                        "id) instead of being sent on or shed")
    f.add_argument("--default-request-ttl", type=float, default=DEFAULTS.default_request_ttl, metavar="S",
                   help="seconds a request may wait; then 429 (503 with no endpoint up), x-llm-d-request-dropped-"
                        "reason: rejected-ttl-expired (default: %(default)s, llm-d's)")
    f.add_argument("--priority-band-max-requests", type=int, default=DEFAULTS.priority_band_max_requests,
                   help="requests one priority band may hold; one more gets 429 at once (default: %(default)s, "
                        "llm-d's)")
    f.add_argument("--fairness-policy", choices=fc.FAIRNESS_POLICIES, default=DEFAULTS.fairness_policy,
                   help="turns within a band: one request per fairness id in turn, or the first come whatever its "
                        "flow (default: %(default)s)")
    g.add_argument("--waiting-metric", default=DEFAULTS.waiting_metric,
                   help="the /metrics gauge of requests waiting in an endpoint's queue (default: %(default)s)")
    g.add_argument("--running-metric", default=DEFAULTS.running_metric,
                   help="the /metrics gauge of requests an endpoint is running (default: %(default)s)")


def settings_from_args(args: argparse.Namespace) -> PickerSettings:
    return PickerSettings(**{f.name: getattr(args, f.name) for f in fields(PickerSettings)}).validate()


def create_picker(settings: PickerSettings = DEFAULTS, endpoints: str = "", *, prefill: str = "",
                  encoders: str = "", kv_events: str = "", pod_roles: str = "") -> Picker:
    """The picker for ``settings`` over pools written as :func:`parse_endpoints` reads them (``kv_events``: where
    endpoints publish their KV-cache events, :func:`parse_kv_events`; ``pod_roles``: each pod's role,
    :func:`roles.parse_roles`, for a pool whose items do not say it)."""
    settings.validate()
    publishers, labels = parse_kv_events(kv_events), roles.parse_roles(pod_roles)

    def pool(text: str) -> Pool:
        listed = parse_endpoints(text)
        for ep in listed:
            ep.kv_events = publishers.get(ep.name)
            ep.role = ep.role or labels.get(ep.address, "")
        return Pool(listed, waiting_metric=settings.waiting_metric, running_metric=settings.running_metric)

    stage_picker = None
    if prefill or encoders:
        stage_picker = StagePicker(pool(prefill), pool(encoders), scorers.create(settings.scorer, settings.scorer_parameters))
    return Picker(pool(endpoints), scorers.create(settings.scorer, settings.scorer_parameters),
                  shed_queue_threshold=settings.shed_queue_threshold, max_fallbacks=settings.max_fallbacks,
                  stages=stage_picker, saturation=Saturation(settings.queue_depth_threshold,
                                                             settings.kv_cache_util_threshold),
                  flow=settings.flow())


def build(args: argparse.Namespace) -> tuple[Picker, list]:
    """The picker the flags describe and its background tasks (with ``--pool-name`` a :class:`KubePool` and the
    pool's :class:`KubeObjectives` first, then one scraper per pool); ValueError names a bad flag value."""
    settings = settings_from_args(args)
    watched = bool(getattr(args, "pool_name", ""))
    if watched and args.endpoints:
        raise ValueError("--endpoints and --pool-name are two sources of the pool: give one")
    picker = create_picker(settings, args.endpoints, prefill=getattr(args, "prefill_endpoints", ""),
                           encoders=getattr(args, "encoder_endpoints", ""), kv_events=getattr(args, "kv_events", ""),
                           pod_roles=args.pod_roles)
    scrapers = [MetricsScraper(p, interval_s=settings.metrics_interval, keep_when_empty=watched and p is picker.pool)
                for p in picker.pools()]
    if not watched:
        return picker, scrapers
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        raise ValueError("--pool-name needs a kubeconfig: --kubeconfig or $KUBECONFIG")
    return picker, [KubePool(picker.pool, kubeconfig, args.pool_namespace, args.pool_name, args.pool_group),
                    KubeObjectives(picker.objectives, kubeconfig, args.pool_namespace, args.pool_name, args.pool_group),
                    *scrapers]


def build_or_exit(args: argparse.Namespace) -> tuple[Picker, list[MetricsScraper]]:
    """:func:`build` for a transport's ``main``: a bad flag value is printed and exits with status 2."""
    try:
        return build(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def service_args(settings: PickerSettings, endpoints: Iterable[Named], *, models: bool = False,
                 prefill: Iterable[Named] = (), encoders: Iterable[Named] = ()) -> list[str]:
    """The flags that start a transport with ``settings`` over these pools (what :func:`build` reads).

    ``settings`` may be any object with :class:`PickerSettings`' attributes (a mode's options).
    """
    endpoints = list(endpoints)
    args = ["--endpoints", format_endpoints(endpoints, models=models)]
    publishers = format_kv_events(endpoints)
    if publishers:
        args += ["--kv-events", publishers]
    prefill, encoders = list(prefill), list(encoders)
    if prefill:
        args += ["--prefill-endpoints", format_endpoints(prefill)]
    if encoders:
        args += ["--encoder-endpoints", format_endpoints(encoders)]
    args += ["--scorer", settings.scorer, "--metrics-interval", f"{settings.metrics_interval:g}",
             "--shed-queue-threshold", f"{settings.shed_queue_threshold:g}", "--max-fallbacks", str(settings.max_fallbacks)]
    for flag, value, default in (("--queue-depth-threshold", settings.queue_depth_threshold,
                                  DEFAULTS.queue_depth_threshold),
                                 ("--kv-cache-util-threshold", settings.kv_cache_util_threshold,
                                  DEFAULTS.kv_cache_util_threshold)):
        if value != default:  # GAIE's defaults are the services' defaults
            args += [flag, f"{value:g}"]
    for flag, name, default in (("--waiting-metric", settings.waiting_metric, DEFAULTS.waiting_metric),
                                ("--running-metric", settings.running_metric, DEFAULTS.running_metric)):
        if name != default:  # vLLM's names are the services' defaults
            args += [flag, name]
    if settings.flow_control:
        args.append("--flow-control")
        for flag, value, default in (("--default-request-ttl", settings.default_request_ttl,
                                      DEFAULTS.default_request_ttl),
                                     ("--priority-band-max-requests", settings.priority_band_max_requests,
                                      DEFAULTS.priority_band_max_requests),
                                     ("--fairness-policy", settings.fairness_policy, DEFAULTS.fairness_policy)):
            if value != default:
                args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if settings.scorer_parameters:
        args += ["--scorer-parameters", json.dumps(settings.scorer_parameters, separators=(",", ":"))]
    return args
