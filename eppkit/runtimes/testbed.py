"""The testbed: one topology started in order, the handles a test holds, stopped in order.

One class for every runtime. A runtime hands it a :class:`~eppkit.runtimes.launching.Launcher` that says how each component runs (a process
of this host: :mod:`eppkit.runtimes.local`; a container: :mod:`eppkit.runtimes.docker`); everything else is here,
once: the start order (dependencies first: Jaeger unless shared, the flow's backends, the mode's services tier by
tier, then Envoy, each waited on until really ready), the stop order, the handles (URLs, client, traces, Envoy's
record) and the pool of a mode whose EPP watches one.
"""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from eppkit import flows, modes
from eppkit.builds import controlplane as controlplane_build
from eppkit.components.base import Component, start_whole
from eppkit.components.controlplane import ControlPlane, SharedControlPlane
from eppkit.components.inference_pool import LOOPBACK_PODS
from eppkit.components.jaeger import Jaeger
from eppkit.components.ports import PortAllocator
from eppkit.components.readiness import GrpcHealthReady, HttpReady, ReadinessTimeout, TcpReady
from eppkit.core.paths import new_run_dir  # (the kit's front ends import it from here)
from eppkit.core.polling import poll
from eppkit.core.progress import say
from eppkit.gateway import config as envoy_config
from eppkit.gateway import hop, user_filters
from eppkit.gateway import process as envoy_process
from eppkit.gateway import versions as envoy_versions
from eppkit.observability import expected_spans
from eppkit.observability.client import TracedClient
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.plan import Endpoint, ModePlan, PoolTarget, ServiceSpec
from eppkit.runtimes.launching import Launcher
from eppkit.runtimes.pool import InferencePoolHandle, missing_kind
from eppkit.services.picker.headers import SERVED
from eppkit.services.pod_headers import HEADER_POD
from eppkit.topology import Topology


@dataclass
class ServiceHandle:
    name: str
    url: str
    process: Component  # a process, or a container: start, stop, kill, is_running, logs
    spec: ServiceSpec | None = None  # how it was started (its ports: grpc_health_port, ...)


class Testbed:
    """A topology's components, run by ``launcher`` (see the module docstring); use it in a ``with`` or call
    start()/stop(). ``topology``: a :class:`~eppkit.topology.Topology`, or one a front end has checked already
    (:func:`eppkit.modes.check`'s :class:`~eppkit.modes.Setup`, read once and handed down); ``jaeger``: a shared one
    (else its own); ``control_plane``: the session's (else its own when its mode watches a pool)."""

    __test__ = False  # pytest: not a test class, in a module that imports it

    def __init__(self, topology: Topology | modes.Setup, launcher: Launcher, *, jaeger: Jaeger | None = None,
                 run_dir: Path | None = None, envoy_env: dict[str, str] | None = None,
                 control_plane: SharedControlPlane | None = None):
        # Its mode and flow (registry entries) and the mode's options, checked: an unknown one, a flow the mode
        # cannot run or an option the mode does not know is a ValueError here, before anything starts.
        self.setup = topology if isinstance(topology, modes.Setup) else modes.check(topology)
        self.topology = topology = self.setup.topology
        self.mode, self.flow, self.options = self.setup.mode, self.setup.flow, self.setup.options
        self.launcher = launcher
        self.runtime = launcher.runtime
        self._stopped = False
        self.run_dir = run_dir or new_run_dir(f"{topology.mode}-{topology.flow}")
        self.ports = PortAllocator()
        self._shared_jaeger = jaeger is not None
        self._jaeger = jaeger
        self._envoy_env = envoy_env or {}
        self.backends: list[Endpoint] = []  # what Envoy routes to
        self.layout: flows.FlowPlan | None = None
        self.services: dict[str, ServiceHandle] = {}
        self.envoy: envoy_process.Envoy | None = None
        self.listen_port = 0
        self.admin_port = 0
        self.envoy_config_path: Path | None = None
        self.envoy_binary: envoy_versions.EnvoyBinary | None = None  # the Envoy (and version) this testbed runs
        self.user_filters: list[user_filters.PreparedFilter] = []
        self._clients: list[TracedClient] = []
        # A mode whose EPP watches an InferencePool: the control plane (the shared one unless the topology asks
        # for its own, or none is shared), and the pool in this testbed's namespace.
        self._shared_plane = None if topology.own_control_plane else control_plane
        self.control_plane: ControlPlane | None = None  # its own (None: the shared one, or none)
        self.pool: InferencePoolHandle | None = None
        self.pod_addresses = LOOPBACK_PODS  # where a pool's pods are (set at start)
        self._plane_binaries: controlplane_build.ControlPlaneBinaries | None = None

    # -- handles ----------------------------------------------------------------------
    @property
    def envoy_url(self) -> str:
        return f"http://127.0.0.1:{self.listen_port}"

    @property
    def envoy_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def jaeger_api_url(self) -> str:
        assert self._jaeger is not None
        return self._jaeger.api_url

    @property
    def otlp_endpoint(self) -> str:
        assert self._jaeger is not None
        return self._jaeger.otlp_grpc_endpoint

    @property
    def jaeger(self) -> JaegerClient:
        return JaegerClient(self.jaeger_api_url)

    def client(self, pool_size: int = 10) -> TracedClient:
        """A traced client of this testbed's Envoy; closed (its spans flushed) when the testbed stops."""
        client = TracedClient(self.envoy_url, self.otlp_endpoint, mode=self.topology.mode, flow=self.topology.flow,
                              pool_size=pool_size)
        self._clients.append(client)
        return client

    def trace_ids(self) -> list[str]:
        """The trace ids of every request this testbed's clients have sent, oldest first."""
        return [trace_id for client in self._clients for trace_id in client.trace_ids]

    def expected_spans(self, media_items: int = 0) -> tuple[expected_spans.SpanRule, ...]:
        """Every span a successful request of this topology produces (its mode's, its flow's, the backend's
        as far as it traces: :func:`eppkit.observability.expected_spans.expected`)."""
        behind = self.flow.spans(self.topology, self.topology.backend.emits, media_items)
        return expected_spans.expected(self.mode, behind)

    def wait_for_trace(self, result_or_id, expected=None, *, timeout_s: float = 15.0, **kwargs):
        """The trace of one request (a ClientResult or a trace id) once it holds every ``expected`` span.

        ``expected`` defaults to :meth:`expected_spans`; pass ``()`` to wait for any span.
        """
        trace_id = getattr(result_or_id, "trace_id", result_or_id)
        for client in self._clients:
            client.flush()
        if expected is None:
            expected = self.expected_spans()
        return self.jaeger.wait_for_trace(trace_id, expected, timeout_s=timeout_s, **kwargs)

    def served_pod(self, headers) -> str | None:
        """The name of the pod that served a response (its headers): in the backend's own words
        (``x-inference-pod``: the mock on every answer, llm-d-inference-sim on completions), else in Envoy's
        (``x-gateway-destination-endpoint-served``, the picked cluster's address, named as this testbed names
        it). None when neither says: a backend without the header (a real vLLM) reached through the pool."""
        if headers.get(HEADER_POD):
            return headers[HEADER_POD]
        address = headers.get(SERVED)
        return {ep.address: ep.name for ep in self.backends}.get(address, address) if address else None

    def hops(self) -> list[hop.Hop]:
        """Every request Envoy has logged so far, as :class:`eppkit.gateway.hop.Hop` (oldest first)."""
        if self.envoy is None:
            return []
        return list(hop.index(self.envoy.process.log_path).update().hops)

    def hop(self, result_or_id, *, timeout_s: float = 5.0) -> hop.Hop:
        """Envoy's record of one request (a ClientResult or a trace id): its phases, the EPP hop's per-phase
        numbers. Envoy writes it within 20 ms of the request's end; PollTimeout after ``timeout_s``."""
        trace_id = getattr(result_or_id, "trace_id", result_or_id)
        log = hop.index(self.envoy.process.log_path) if self.envoy is not None else None
        return poll(lambda: log.find(trace_id) if log is not None else None, timeout_s=timeout_s, interval_s=0.05,
                    describe=f"Envoy's access log line of trace {trace_id}")

    def healthy(self) -> bool:
        """Every component is still running."""
        return bool(self.processes()) and all(p.is_running() for p in self.processes().values())

    def describe(self) -> str:
        """Where everything is: Envoy, Jaeger, each service, the run folder (what `eppkit up` prints)."""
        lines = [f"  Envoy        {self.envoy_url}   (admin {self.envoy_admin_url})",
                 f"  Jaeger API   {self.jaeger_api_url}/api/v3/traces/<trace id>",
                 f"  OTLP gRPC    {self.otlp_endpoint}"]
        # In pd / epd / ttft Envoy routes to each decoder's pd-sidecar under the decoder's name:
        # the decoder's line gives its own address, the sidecar's line the one Envoy routes to.
        routed = {ep.name: ep for ep in self.backends}
        fronted = {ep.address: ep.name for ep in self.backends}
        for ep in self.backends:
            own = self.services[ep.name].url if ep.name in self.services else f"http://{ep.address}"
            lines.append(f"  {ep.name:<12} {own}  role={ep.role} model={ep.model}")
        for name, svc in self.services.items():
            if name in routed:
                continue
            front = fronted.get(svc.url.removeprefix("http://"))
            lines.append(f"  {name:<12} {svc.url}" + (f"  (Envoy routes here; in front of {front})" if front else ""))
        if self.pool is not None:
            lines.append(f"  kubeconfig   {self.pool.target.kubeconfig}  (InferencePool {self.pool.target.name} in namespace "
                         f"{self.pool.target.namespace}; kube-apiserver {self.pool.plane.server})")
        lines.append(f"  logs         {self.run_dir}")
        return "\n".join(lines)

    @property
    def kubeconfig(self) -> Path | None:
        """A kubeconfig of the control plane, in this testbed's namespace (None: its mode watches no pool)."""
        return Path(self.pool.target.kubeconfig) if self.pool is not None else None

    def processes(self) -> dict[str, Component]:
        procs = {name: h.process for name, h in self.services.items()}
        if self.control_plane is not None:
            procs.update(self.control_plane.processes())
        if self.envoy is not None:
            procs["envoy"] = self.envoy.process
        if self._jaeger is not None and self._jaeger.process is not None and not self._shared_jaeger:
            procs["jaeger"] = self._jaeger.process
        return procs

    def log_tails(self, lines: int = 60) -> str:
        """Every component's last log lines, each under a `=== name ===` label."""
        parts = []
        for name, proc in self.processes().items():
            parts.append(f"=== {name} ({proc.log_path}) ===\n{proc.log_tail(lines)}")
        return "\n".join(parts)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Testbed":
        self._stopped = False
        start_whole(self, "testbed")
        return self

    def _start(self) -> None:
        """The order every runtime follows; the launcher says how each component runs."""
        self.topology.backend.require_installed()  # a preset not built or installed: said before anything starts
        # Before anything starts: the Envoy version (installed once) and the user's filters, built
        # and each validated by that Envoy, so a broken plugin fails here in Envoy's own words.
        self.envoy_binary = envoy_versions.resolve(self.topology.envoy_version, say)
        watches_pool = self.setup.watches_pool
        if watches_pool:  # etcd and kube-apiserver (built now if need be): a missing one fails before anything runs
            self._plane_binaries = controlplane_build.build(say)
        self.user_filters = user_filters.prepare(self.topology.filters, self.envoy_binary, self.run_dir, say,
                                                 self._envoy_env)
        if self._jaeger is None:
            self._jaeger = self.launcher.jaeger(self.run_dir, self.ports).start()
        env = self.topology.service_env(self.otlp_endpoint)
        # Two tiers, each started at once and then waited on: a Python service takes ~0.4 s to
        # import and bind, so one after another was most of a testbed's start. The pickers come
        # second because their first metrics scrape must find the backends up.
        if watches_pool:  # where its pods are: loopback addresses, or the runtime's own (a cluster's pod network)
            self.pod_addresses = self.launcher.pod_addresses(self.run_dir)
        layout = self.flow.plan(self.topology, self.ports, self.run_dir, self.pod_addresses if watches_pool else False)
        self._start_services(layout.services, env)
        layout.routable = [self._settled(ep, layout.servers) for ep in layout.routable]
        self.layout = layout
        self.backends = layout.routable
        # On this thread, not beside the backends' start in a worker thread: a child's parent-death signal
        # (ManagedProcess) follows the thread that started it, and a session's control plane outlives any worker.
        target = self._pool_target() if watches_pool else None

        plan = self.mode.plan(self.topology, self.options, self.ports, self.backends, layout, target)
        if target is not None:
            self._create_pool(target, plan)
        for tier in sorted({spec.tier for spec in plan.services}):
            try:
                self._start_services([spec for spec in plan.services if spec.tier == tier], env)
            except ReadinessTimeout as exc:  # an EPP of a pool: a kind it watches that has no CRD, said so
                log = "\n".join(p.read_log() for name, p in self.processes().items() if name == self.mode.picker)
                raise (missing_kind(exc, log, self.pool, self.run_dir) if target is not None else exc) from None

        self.listen_port, self.admin_port = self.ports.port(), self.ports.port()
        variables = {
            "mode": self.mode.name,
            "admin_port": self.admin_port,
            "listen_port": self.listen_port,
            "jaeger_otlp_grpc_port": self._jaeger.ports.otlp_grpc,
            "backends": self.backends,
            "flow": self.topology.flow,
            "tracing": self.topology.tracing,
            **envoy_config.client_timeouts(self.options),
            **plan.envoy_vars,
            **user_filters.template_vars(self.user_filters),
            "eds_dir": str(self.pool.eds_dir) if self.pool is not None else None,
            # envoy/_picked.j2: the served endpoint as envoy.lb metadata where this Envoy can.
            "served_metadata": self.envoy_binary.at_least(envoy_versions.SELECTED_HOST_KEY_SINCE),
        }
        self.envoy_config_path = envoy_config.write(self.mode.template, variables, self.run_dir / "envoy.yaml")
        envoy_env = {**plan.envoy_env, **self._envoy_env}  # (GODEBUG for a Go module: eppkit.gateway.go_modules)
        envoy_config.validate(self.envoy_binary, self.envoy_config_path, what=f"the {self.topology.mode} mode",
                              env=envoy_env)
        self.envoy = self.launcher.envoy(self.envoy_binary, self.envoy_config_path, self.run_dir, self.admin_port,
                                         envoy_env)
        self.envoy.start()

    # -- the control plane of an EPP that watches an InferencePool ----------------------------
    def _pool_target(self) -> PoolTarget:
        """This testbed's namespace in the control plane (started now if need be) and its kubeconfig; or, on a
        runtime that is a cluster, the cluster's own API server, its pods real (the launcher's pool_home)."""
        home = self.launcher.pool_home(self.run_dir)
        if home is not None:
            plane, namespace = home
            target = PoolTarget(str(plane.write_kubeconfig(self.run_dir / "kubeconfig", namespace)), namespace)
            self.pool = InferencePoolHandle(self, plane, target, shared=True, real_pods=True)
            return target
        if self._shared_plane is not None:
            self.control_plane = None
            plane = self._shared_plane.get()
        else:
            self.control_plane = plane = ControlPlane(self.run_dir / "control-plane", ports=self.ports,
                                                      binaries=self._plane_binaries).start()
        namespace = plane.new_namespace(self.run_dir.name)
        kubeconfig = plane.write_kubeconfig(self.run_dir / "kubeconfig", namespace)
        target = PoolTarget(str(kubeconfig), namespace)
        self.pool = InferencePoolHandle(self, plane, target, shared=self._shared_plane is not None)
        return target

    def _create_pool(self, target: PoolTarget, plan: ModePlan) -> None:
        """The InferencePool and one Pod per backend, before the EPP starts (it lists them at once)."""
        if plan.crds:
            self.pool.plane.apply_crds([Path(f) for f in plan.crds])
        picker = next((spec.port for spec in plan.services if spec.name == self.mode.picker), 0)
        self.pool.create(self.backends, picker or int(plan.envoy_vars.get("epp_port", 0)), plan.envoy_vars["pools"],
                         self.layout.servers)

    # -- what the pool does to the testbed (runtimes/pool.py's PoolBed) ---------------------------
    def envoy_running(self) -> bool:
        return self.envoy is not None

    def start_backend(self, name: str, endpoint: Endpoint, spec: ServiceSpec) -> None:
        old = self.services.pop(name, None)
        if old is not None:  # killed before (a crashed pod): what is left of it goes (a container, a Pod)
            _quietly(old.process.stop, name)
        self._start_services([spec], self.topology.service_env(self.otlp_endpoint))
        endpoint = self._settled(endpoint)
        self.backends = [ep for ep in self.backends if ep.name != endpoint.name] + [endpoint]

    def _settled(self, endpoint: Endpoint, servers: dict[str, str] | None = None) -> Endpoint:
        """``endpoint`` at the address its pod learned when it started (a Pod a cluster's network placed, told
        ``$(POD_IP)``: eppkit.cluster.remote), else as it is."""
        handle = self.services.get((servers or {}).get(endpoint.name, endpoint.name))
        learned = handle.process.learned_address if handle is not None else None
        if not learned:
            return endpoint
        kv_events = endpoint.kv_events.replace(endpoint.host, learned) if endpoint.kv_events else endpoint.kv_events
        return dataclasses.replace(endpoint, host=learned, kv_events=kv_events)

    def envoy_files_changed(self, folder: Path) -> None:
        """Envoy's files in ``folder`` were rewritten here: where Envoy reads a copy of its own (a Pod on a cluster
        of your own) that copy is brought up to date; elsewhere it reads them itself."""
        if self.envoy is not None:
            self.envoy.process.refresh(folder)

    def service_running(self, name: str) -> bool:
        handle = self.services.get(name)
        return handle is not None and handle.process.is_running()

    def stop_service(self, name: str, *, crash: bool) -> None:
        handle = self.services.get(name)
        if handle is not None:
            handle.process.kill() if crash else handle.process.stop()

    def forget_backend(self, service: str, pod: str) -> None:
        self.services.pop(service, None)
        self.backends = [ep for ep in self.backends if ep.name != pod]

    def _start_services(self, specs: list[ServiceSpec], env: dict[str, str]) -> None:
        """Start every service of one tier, then wait until each is ready."""
        started = []
        for spec in specs:
            spec_env = {**env, **self.topology.standard_otel_env(self.otlp_endpoint, spec.name)} if spec.standard_otel else env
            proc = self.launcher.service(spec, spec_env, self.run_dir, self._otlp_args(spec)).start()
            url = f"http://{spec.host.split(',')[0]}:{spec.port}"  # a mock of many pods: its first address
            self.services[spec.name] = ServiceHandle(spec.name, url, proc, spec)
            started.append((spec, url, proc))
        ready_timeout_s = self.options.ready_timeout_s
        for spec, url, proc in started:
            if spec.health_path:
                strategy = HttpReady(url + spec.health_path)
            elif spec.grpc_health_port:
                strategy = GrpcHealthReady(spec.host, spec.grpc_health_port)
            else:
                strategy = TcpReady(spec.host, spec.port)
            hint = (f"check its command line: {' '.join(spec.argv)}" if spec.argv else
                    f"run `python -m {spec.module} --help` and check the flags: {' '.join(spec.args)}")
            strategy.timeout_s = max(ready_timeout_s, spec.start_timeout_s or 0.0)
            proc.wait_ready(strategy, hint=hint)
            learned = proc.learned_address  # its network placed it: its URL at that address
            if learned:
                self.services[spec.name] = ServiceHandle(spec.name, f"http://{learned}:{spec.port}", proc, spec)

    def _otlp_args(self, spec: ServiceSpec) -> list[str]:
        """``spec.otlp_flag`` and the testbed's OTLP endpoint, when the program takes it so and tracing is on."""
        if not spec.otlp_flag or not self.topology.tracing:
            return []
        return [spec.otlp_flag, f"http://{self.otlp_endpoint}"]

    def _stop_services(self) -> None:
        """Every service asked to stop at once (SIGINT to a process, a stop to a container's engine), then each
        one's bounded wait (see ManagedProcess.stop)."""
        handles = list(self.services.values())
        if handles:
            with ThreadPoolExecutor(max_workers=min(8, len(handles))) as pool:
                list(pool.map(lambda h: _quietly(h.process.stop, h.name), handles))

    def _close_clients(self) -> None:
        for client in self._clients:
            try:
                client.close()
            except Exception:  # a client's exporter failing to flush must not keep anything running
                pass
        self._clients.clear()

    def _stop_pool(self) -> None:
        """The pool's objects (on a shared control plane) and a control plane of its own, after the EPP stopped."""
        if self.pool is not None:
            try:
                self.pool.close()
            except Exception as exc:  # the objects of a stopped control plane: nothing to clean
                print(f"warning: removing the testbed's pool failed: {exc}", file=sys.stderr)
        if self.control_plane is not None:
            self.control_plane.stop()

    def stop(self) -> None:
        """Once: a testbed stopped early (the conformance suite retires its variants) is stopped again at the end."""
        if not self._stopped:
            self._stopped = True
            self._stop()

    def _stop(self) -> None:
        """The order every runtime stops in. Envoy first, so no new request reaches a stopping service; Jaeger last,
        so spans still land. One part failing to stop does not keep the others running."""
        self._close_clients()
        if self.envoy is not None:
            _quietly(self.envoy.stop, "envoy")
        self._stop_services()
        self._stop_pool()  # on every runtime the control plane's processes are this host's
        if self._jaeger is not None and not self._shared_jaeger:
            _quietly(self._jaeger.stop, "jaeger")
        # What the runtime holds for the testbed (a namespace, a block of addresses).
        _quietly(lambda: self.launcher.release(self.run_dir), "the runtime's hold")
        self.ports.release()

    def __enter__(self) -> "Testbed":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _quietly(stop, name: str) -> None:
    try:
        stop()
    except Exception as exc:  # one failed stop must not leave the others running
        print(f"warning: stopping {name} failed: {exc}", file=sys.stderr)
