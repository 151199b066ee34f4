"""A real Kubernetes control plane on loopback, started in a ``with``: etcd and kube-apiserver, GAIE's CRDs.

What controller-runtime's envtest starts, for the EPPs that are Kubernetes controllers (GAIE's EPP, a team's
own): they watch an InferencePool and its Pods through a real API server, with its validation, its watch
cache and its auth. There is no scheduler, controller-manager or kubelet: Pods are API objects whose status
(IP, Ready) the kit writes itself (:mod:`eppkit.components.inference_pool`).

    with ControlPlane(run_dir) as cp:
        cp.kubeconfig            # https://127.0.0.1:PORT, the CA, a bearer token
        cp.client().list(Pod, namespace="default")

Start, about 1.5-2 s on 2 cores:

1. certificates (``cryptography``): a CA, the API server's serving certificate for 127.0.0.1, the
   service-account signing key pair; a token file (the kit's one user is in ``system:masters``);
2. etcd's data dir, copied from a snapshot in the cache in which GAIE's CRDs were established long ago
   (made once, by :func:`snapshot`). A fresh one costs ~3 s more: the apiextensions server sleeps 2 s
   before serving the first object of a CRD that became Established less than 2 s ago (an HA guard,
   ``customresource_handler.go``; no flag turns it off);
3. etcd without fsync and with a 10 ms heartbeat (a single member elects itself at once), ready on ``/health``;
4. kube-apiserver, ready on ``/readyz`` (without the PriorityClass hook's 1 s sleep, see
   :class:`~eppkit.components.readiness.ApiServerReady`);
5. each custom resource type read once: the first request for a type whose watch cache is not yet
   initialised gets 429 ``Retry-After: 1``, and an EPP's client-go obeys it (a second lost at its start).

Stop: the API server, then etcd (an API server whose etcd is gone retries it), then etcd's data dir goes
(62 MB while it runs: etcd preallocates its WAL). Everything binds 127.0.0.1.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import requests

from eppkit.builds import controlplane as builds
from eppkit.components import kubeapi
from eppkit.components.base import start_whole
from eppkit.components.pki import kubeconfig_text, write_certificates
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import ApiServerReady, HttpReady
from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.progress import say

USER = "eppkit-admin"
# The PriorityClass post-start hook waits 1 s before its first try; nothing here uses PriorityClasses.
READYZ_EXCLUDE = ("poststarthook/scheduling/bootstrap-system-priority-classes",)
SNAPSHOT_RECIPE = 1  # bump when what a snapshot holds changes
ETCD_DATA = "etcd-data"


class ControlPlaneError(RuntimeError):
    """The control plane could not start, or refused what the kit asked of it; the message says what to do."""


def sparse_copy(source: Path, target: Path) -> None:
    """etcd's data dir is mostly a preallocated, zero-filled 64 MB WAL: a sparse copy is ~1 MB and ~10 ms."""
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True, timeout=60)


class ControlPlane:
    """etcd and kube-apiserver on free loopback ports, with GAIE's CRDs (see the module docstring).

    ``from_snapshot=False`` starts from an empty etcd and applies the CRDs (what :func:`snapshot` does once).
    ``kubelets``: the API server also talks to kubelets (a one-node cluster's, :mod:`eppkit.cluster`): with its
    client certificate, at their Hostname address.
    """

    def __init__(self, run_dir: Path, *, ports: PortAllocator | None = None,
                 binaries: builds.ControlPlaneBinaries | None = None, from_snapshot: bool = True,
                 progress: Callable[[str], object] = say, kubelets: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.ports = ports or PortAllocator()
        self.binaries = binaries
        self.from_snapshot = from_snapshot
        self.progress = progress
        self.kubelets = kubelets
        self.token = secrets.token_hex(16)
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.server = ""
        self.started_s = 0.0  # seconds start() took
        self.phases: dict[str, float] = {}  # seconds from start() to the end of each phase
        self._keep_data = False
        self._namespaces: set[str] = set()
        self._parsed = None  # its kubeconfig, parsed (_config)

    @classmethod
    def attached(cls, run_dir: Path) -> "ControlPlane":
        """One that runs already (the one-node cluster's): its certificates and kubeconfig in ``run_dir``, its
        server and token read from that kubeconfig; stop() leaves it running."""
        import json

        config = json.loads((Path(run_dir) / "kubeconfig").read_text())
        plane = cls(run_dir)
        plane.server = config["clusters"][0]["cluster"]["server"]
        plane.token = config["users"][0]["user"]["token"]
        plane._keep_data = True
        return plane

    # -- where it is ---------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for this control plane (JSON, which is YAML), its context in ``namespace``."""
        Path(path).write_text(kubeconfig_text(self.server, self.pki / "ca.crt", USER, self.token, namespace))
        return Path(path)

    def client(self, namespace: str | None = None):
        """A lightkube client of this control plane (no proxy or CA from the environment)."""
        return kubeapi.client(self._config(), namespace)

    def async_client(self, namespace: str | None = None):
        return kubeapi.client(self._config(), namespace, asynchronous=True)

    def _config(self):
        """Its kubeconfig, parsed once (it is written once it runs, or read as it is when attached)."""
        if self._parsed is None:
            self._parsed = kubeapi.load(self.kubeconfig)
        return self._parsed

    def new_namespace(self, wanted: str) -> str:
        """Create a namespace named after ``wanted`` (made a DNS label; a suffix when taken) and return its name."""
        from lightkube import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace

        base = re.sub(r"[^a-z0-9-]+", "-", wanted.lower()).strip("-")[:56].strip("-") or "eppkit"
        client = self.client()
        try:
            for i in range(100):
                name = base if i == 0 else f"{base}-{i}"
                try:
                    client.create(Namespace(metadata=ObjectMeta(name=name)))
                except ApiError as exc:
                    if exc.status.code == 409:
                        continue
                    raise ControlPlaneError(f"cannot create namespace {name}: {exc.status.message}") from None
                self._namespaces.add(name)
                return name
        finally:
            client.close()
        raise ControlPlaneError(f"no free namespace name like {base!r} after 100 tries")

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "ControlPlane":
        started = time.monotonic()
        start_whole(self, "the control plane")
        self.started_s = time.monotonic() - started
        return self

    def _phase(self, name: str, t0: float) -> None:
        self.phases[name] = round(time.monotonic() - t0, 3)

    def _start(self) -> None:
        t0 = time.monotonic()
        if self.binaries is None:
            try:
                self.binaries = builds.build(self.progress)  # cached: at once; else builds, with progress
            except builds.ControlPlaneBuildError as exc:
                raise ControlPlaneError(str(exc)) from None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_certificates(self.pki)
        (self.pki / "tokens.csv").write_text(f'{self.token},{USER},{USER},"system:masters"\n')
        self._phase("certificates", t0)
        data = self.run_dir / ETCD_DATA
        shutil.rmtree(data, ignore_errors=True)
        if self.from_snapshot:
            sparse_copy(snapshot(self.binaries, self.progress), data)
            self._phase("snapshot copied", t0)
        self.etcd = self._start_etcd(data)
        self._phase("etcd ready", t0)
        self.apiserver = self._start_apiserver()
        self._phase("kube-apiserver ready", t0)
        self.write_kubeconfig(self.kubeconfig)
        self._parsed = None  # a new server and token: parsed again when asked
        if not self.from_snapshot:
            self._apply_crds()
            self._phase("CRDs established", t0)
        self._warm_custom_types()
        self._phase("custom types read", t0)

    def _start_etcd(self, data: Path) -> ManagedProcess:
        client, peer = (f"http://127.0.0.1:{self.ports.port()}" for _ in range(2))
        argv = [str(self.binaries.etcd), "--name", "eppkit", "--data-dir", str(data),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"eppkit={peer}",
                # Throwaway data: no fsync per write. One member: elect at once (the 100/1000 ms defaults
                # made /health take 0.3-1 s).
                "--unsafe-no-fsync", "--heartbeat-interval", "10", "--election-timeout", "100", "--log-level", "warn"]
        proc = ManagedProcess("etcd", argv, self.run_dir / "etcd.log").start()
        self.etcd_url = client
        return proc.wait_ready(HttpReady(f"{client}/health", body_contains='"true"', timeout_s=30),
                               hint=f"run `{self.binaries.etcd} --version`; the data dir is {data}")

    def _start_apiserver(self) -> ManagedProcess:
        port = self.ports.port()
        pki = self.pki
        argv = [str(self.binaries.kube_apiserver), "--etcd-servers", self.etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
                "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
                "--token-auth-file", str(pki / "tokens.csv"), "--anonymous-auth=false",
                # A cluster's (kubelets): RBAC, so an in-cluster EPP has only its Role's rights (the kit's token is
                # system:masters, and so are its daemons'); the testbeds' own: everything allowed on loopback.
                "--authorization-mode", "RBAC" if self.kubelets else "AlwaysAllow",
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                # No controller-manager makes service accounts, and nothing here routes Services.
                "--disable-admission-plugins", "ServiceAccount", "--endpoint-reconciler-type", "none",
                "--service-cluster-ip-range", "10.96.0.0/24", "--profiling=false",
                "--cert-dir", str(pki / "generated"), "-v", "0"]
        if self.kubelets:
            argv += ["--kubelet-client-certificate", str(pki / "kubelet-client.crt"),
                     "--kubelet-client-key", str(pki / "kubelet-client.key"),
                     "--kubelet-preferred-address-types", "Hostname"]
        proc = ManagedProcess("kube-apiserver", argv, self.run_dir / "kube-apiserver.log").start()
        self.server = f"https://127.0.0.1:{port}"
        return proc.wait_ready(ApiServerReady(self.server, str(pki / "ca.crt"), self.token, READYZ_EXCLUDE),
                               hint=f"the whole log is {proc.log_path}; `{self.binaries.kube_apiserver} --version` "
                                    "checks the binary")

    def _session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.pki / "ca.crt")
        session.headers["Authorization"] = f"Bearer {self.token}"
        return session

    def _crd_manifests(self, files: list[Path] | None = None) -> list[dict]:
        import yaml

        files = self.binaries.crd_files() if files is None else files
        return [doc for f in files for doc in yaml.safe_load_all(Path(f).read_text()) if doc]

    def apply_crds(self, files: list[Path]) -> list[str]:
        """Install CRD manifests (an EPP's own kinds) and wait until each is Established; their names.
        One already there is left as it is. A file that is no CRD is a ControlPlaneError."""
        manifests = self._crd_manifests(files)
        bad = [m.get("kind") for m in manifests if m.get("kind") != "CustomResourceDefinition"]
        if bad:
            raise ControlPlaneError(f"not CRDs: {', '.join(map(str, bad))} in {', '.join(map(str, files))}")
        self._apply_crds(manifests=manifests)
        self._warm_custom_types(manifests)
        return [m["metadata"]["name"] for m in manifests]

    def _apply_crds(self, timeout_s: float = 60.0, manifests: list[dict] | None = None) -> None:
        manifests = self._crd_manifests() if manifests is None else manifests
        with self._session() as http:
            for crd in manifests:
                resp = http.post(f"{self.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd,
                                 timeout=30)
                if resp.status_code not in (201, 409):
                    raise ControlPlaneError(f"the API server refused CRD {crd['metadata']['name']}: "
                                            f"{resp.status_code} {resp.text[:500]}")
            for crd in manifests:
                name = crd["metadata"]["name"]
                self._until(http, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                            lambda r: r.status_code == 200 and any(
                                c.get("type") == "Established" and c.get("status") == "True"
                                for c in r.json().get("status", {}).get("conditions", [])),
                            f"CRD {name} Established", timeout_s)

    def _warm_custom_types(self, manifests: list[dict] | None = None, timeout_s: float = 30.0) -> None:
        """Read each custom resource type once, so no EPP meets the 429 of a watch cache still initialising."""
        with self._session() as http:
            for crd in self._crd_manifests() if manifests is None else manifests:
                spec = crd["spec"]
                for version in (v["name"] for v in spec["versions"] if v.get("served")):
                    path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1"
                    self._until(http, path, lambda r: r.status_code == 200, f"GET {path} -> 200", timeout_s)

    def _until(self, http: requests.Session, path: str, ok: Callable[[requests.Response], bool], what: str,
               timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            resp = http.get(self.server + path, timeout=5)
            if ok(resp):
                return
            last = f"{resp.status_code} {resp.text[:200]}"
            time.sleep(0.01 if resp.status_code in (404, 429) else 0.05)
        raise ControlPlaneError(f"{what}: not within {timeout_s:g} s (last answer: {last}).\n"
                                f"Hint: read {self.run_dir / 'kube-apiserver.log'}")

    def served_crds(self) -> list[str]:
        """The CRDs it serves now (``plural.group``): GAIE's, and any a testbed installed."""
        with self._session() as http:
            answer = http.get(f"{self.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", timeout=10)
        return sorted(item["metadata"]["name"] for item in answer.json().get("items", []))

    def processes(self) -> dict[str, ManagedProcess]:
        return {p.name: p for p in (self.etcd, self.apiserver) if p is not None}

    def is_running(self) -> bool:
        procs = self.processes()
        return len(procs) == 2 and all(p.is_running() for p in procs.values())

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"=== {name} ({p.log_path}) ===\n{p.log_tail(lines)}" for name, p in self.processes().items())

    def stop(self) -> None:
        # The API server first: without its etcd it would retry it until killed.
        if self.apiserver is not None:
            self.apiserver.stop(grace_s=3.0)
        if self.etcd is not None:
            self.etcd.stop(grace_s=3.0)
        if not self._keep_data:
            shutil.rmtree(self.run_dir / ETCD_DATA, ignore_errors=True)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def snapshot_dir(binaries: builds.ControlPlaneBinaries) -> Path:
    """Where the snapshot of these binaries and CRDs lives (its name changes with either)."""
    import hashlib

    h = hashlib.sha256(f"{SNAPSHOT_RECIPE}:{builds.KUBE_VERSION}:{builds.ETCD_VERSION}:{binaries.source}".encode())
    for binary in (binaries.etcd, binaries.kube_apiserver):
        h.update(f"{binary.stat().st_size}:{binary.stat().st_mtime_ns}".encode())
    for f in binaries.crd_files():
        h.update(f.read_bytes())
    return cache_dir() / "controlplane" / f"snapshot-{h.hexdigest()[:16]}"


def snapshot(binaries: builds.ControlPlaneBinaries, progress: Callable[[str], object] = say) -> Path:
    """etcd's data with the CRDs established, made once per binaries and CRDs (a few seconds), then reused."""
    folder = snapshot_dir(binaries)
    data = folder / ETCD_DATA
    if data.is_dir():
        return data
    folder.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(folder.parent / "snapshot.lock"):
        if data.is_dir():
            return data
        progress("control plane: making its snapshot (GAIE's CRDs established; once) ...")
        work = Path(tempfile.mkdtemp(prefix="snapshot.", dir=folder.parent))
        try:
            plane = ControlPlane(work, binaries=binaries, from_snapshot=False, progress=progress)
            plane._keep_data = True
            with plane:
                pass
            folder.mkdir(exist_ok=True)
            sparse_copy(work / ETCD_DATA, folder / f"{ETCD_DATA}.partial")
            (folder / f"{ETCD_DATA}.partial").rename(data)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        progress(f"control plane: snapshot in {folder}")
    return data


class SharedControlPlane:
    """One control plane for many testbeds (a pytest session's): started by the first testbed that needs it,
    stopped with :meth:`stop`. Each testbed gets its own namespace in it. Call :meth:`get` from a thread that
    lives as long as the control plane should: its processes die with the thread that started them
    (PR_SET_PDEATHSIG, :mod:`eppkit.components.process`)."""

    def __init__(self, run_dir: Callable[[], Path], **kwargs) -> None:
        self._run_dir = run_dir  # called once, at the start: where its logs go
        self._kwargs = kwargs
        self._plane: ControlPlane | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def started(self) -> ControlPlane | None:
        return self._plane

    def get(self) -> ControlPlane:
        """The control plane, started now if it is not yet (or started again if it died)."""
        with self._lock:
            if self._plane is not None and not self._plane.is_running():
                self._plane.stop()
                self._plane = None
            if self._plane is None:
                self._plane = ControlPlane(self._run_dir(), **self._kwargs).start()
            return self._plane

    def start_beside(self) -> None:
        """Start it now on a thread of its own that lives until :meth:`stop` (its processes die with the thread that
        started them): a verdict that will need it starts it while its first checks run; :meth:`get` waits for it."""
        def hold() -> None:
            try:
                self.get()
            except Exception:  # noqa: BLE001 (the testbed that needs it calls get() again and says why)
                return
            self._stopping.wait()

        threading.Thread(target=hold, name="eppkit-control-plane", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._plane is not None:
                self._plane.stop()
                self._plane = None

    def __enter__(self) -> "SharedControlPlane":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
