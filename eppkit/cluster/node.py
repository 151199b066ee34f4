"""The one-node cluster's daemons, started and stopped in order by its supervisor (:mod:`eppkit.cluster.supervisor`,
which runs in a mount namespace of its own): containerd, etcd and kube-apiserver (the kit's control plane, which
also talks to kubelets), kube-controller-manager, kube-scheduler and the kubelet.

Start (warm, on 2 cores: a few seconds): the host paths the kubelet insists on are bind-mounted from the kit's
cache inside the namespace, its kernel settings are masked by files there (it writes them, the host's stay as they
are); containerd starts, the pause image is imported once; the control plane starts from its snapshot; the cgroup
root is made; the three Kubernetes daemons start together; ready when the Node is Ready.

Stop: every pod's containers go first (kubelet stopped, then each containerd task killed and removed), then the
Kubernetes daemons, containerd, the control plane, the leftover shims and the cgroup root.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from eppkit.builds import controlplane as plane_build
from eppkit.builds import kubenode
from eppkit.cluster import configs, images, podnet
from eppkit.cluster.configs import Layout
from eppkit.components.base import start_whole
from eppkit.components.controlplane import ControlPlane
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady
from eppkit.core import procfs
from eppkit.core.polling import poll

# What the kubelet writes to the kernel at its start (setupKernelTunables): masked inside the namespace.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
# Host paths the kubelet and containerd's shims use whatever they are told: the kit's folders stand there instead.
KUBELET_HOME = Path("/var/lib/kubelet")
CONTAINER_LOGS = Path("/var/log/containers")
SHIM_STATE = Path("/run/containerd")  # runc's state and the shims' sockets (containerd's defaults.DefaultStateDir)
CGROUP_ROOT = "eppkit"
NODE_READY_S = 60.0


def cgroup_dirs() -> list[Path]:
    """The node's cgroup root in each hierarchy (v1: one a controller; v2: one)."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return [base / CGROUP_ROOT]
    return [p / CGROUP_ROOT for p in sorted(base.iterdir()) if p.is_dir() and not p.is_symlink()
            and p.name not in ("unified",)]


def _mount(source: Path | str, target: Path, *options: str) -> None:
    subprocess.run(["mount", *options, str(source), str(target)], check=True, capture_output=True, timeout=30)


class Node:
    """The daemons of one cluster (see the module docstring); ``run_dir`` holds their logs."""

    def __init__(self, layout: Layout, progress=print) -> None:
        self.layout = layout
        self.run_dir = layout.home / "logs"
        self.progress = progress
        self.ports = PortAllocator()
        self.plane: ControlPlane | None = None
        self.containerd: ManagedProcess | None = None
        self.daemons: dict[str, ManagedProcess] = {}
        self.phases: dict[str, float] = {}
        self.binaries: kubenode.NodeBinaries | None = None

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> "Node":
        start_whole(self, "the one-node cluster")
        return self

    def _phase(self, name: str, t0: float) -> None:
        self.phases[name] = round(time.monotonic() - t0, 3)

    def _start(self) -> None:
        t0 = time.monotonic()
        layout = self.layout
        self.binaries = kubenode.find()
        if self.binaries is None:
            raise RuntimeError(kubenode.missing_message())
        for folder in (layout.home, layout.containerd_state, layout.kubelet_root, layout.pod_logs, layout.cni_conf,
                       layout.home / "container-logs", self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._private_mounts()
        self._phase("mounts", t0)
        pause = images.pause_tag(self.binaries.path(kubenode.PAUSE))
        (layout.home / "containerd.toml").write_text(configs.containerd_toml(layout, pause))
        (layout.cni_conf / "10-eppkit.conflist").write_text(configs.cni_conflist(layout))
        podnet.install_plugins(layout.cni_bin, layout.pins, configs.CNI_BIN)
        podnet.clear(layout.pins, layout.blocks)  # no testbed runs on a cluster that is starting
        podnet.up()
        self.containerd = ManagedProcess("containerd", ["containerd", "--config", str(layout.home / "containerd.toml"),
                                                        "--log-level", "warn"], self.run_dir / "containerd.log").start()
        self.plane = ControlPlane(layout.plane, ports=self.ports, kubelets=True, progress=self.progress)
        self.plane.binaries = plane_build.build(self.progress)
        self.plane.start()
        self._phase("control plane ready", t0)
        poll(layout.containerd_socket.exists, timeout_s=30, interval_s=0.02, describe="containerd's socket")
        images.ensure_pause(layout.containerd_socket, self.binaries.path(kubenode.PAUSE))
        self._phase("containerd ready, pause imported", t0)
        for cgroup in cgroup_dirs():
            cgroup.mkdir(exist_ok=True)
        self._start_kubernetes()
        self._phase("daemons started", t0)
        self._wait_node_ready()
        self._phase("node Ready", t0)

    def _private_mounts(self) -> None:
        """Inside the supervisor's mount namespace only: the kit's folders over the kubelet's fixed host paths,
        a tmpfs for the shims' state, and files over the kernel settings the kubelet writes."""
        layout = self.layout
        for target, source in ((KUBELET_HOME, layout.kubelet_root), (CONTAINER_LOGS, layout.home / "container-logs")):
            target.mkdir(parents=True, exist_ok=True)  # an empty mount point on the host: nothing else
            _mount(source, target, "--bind")
        SHIM_STATE.mkdir(parents=True, exist_ok=True)
        _mount("tmpfs", SHIM_STATE, "-t", "tmpfs", "-o", "mode=0711")
        masks = layout.home / "sysctl"
        masks.mkdir(exist_ok=True)
        for name in SYSCTLS:
            real = Path("/proc/sys") / name
            if not real.exists():
                continue
            mask = masks / name.replace("/", ".")
            mask.write_text(real.read_text())
            _mount(mask, real, "--bind")

    def _kubeconfig(self, name: str) -> Path:
        path = self.layout.home / f"{name}.kubeconfig"
        self.plane.write_kubeconfig(path)
        path.chmod(0o600)
        return path

    def _start_kubernetes(self) -> None:
        layout, pki, b = self.layout, self.plane.pki, self.binaries
        self._kubeconfig("admin")  # layout.kubeconfig: what `eppkit cluster status`, the launcher and users read
        (layout.home / "kubelet.yaml").write_text(configs.kubelet_yaml(layout, pki / "ca.crt"))
        argvs = {
            kubenode.KUBELET: [str(b.kubelet), "--config", str(layout.home / "kubelet.yaml"),
                               "--kubeconfig", str(self._kubeconfig("kubelet")),
                               "--hostname-override", configs.NODE, "--node-ip", podnet.HOST, "--root-dir", str(KUBELET_HOME), "-v", "0"],
            kubenode.CONTROLLER_MANAGER: [
                str(b.path(kubenode.CONTROLLER_MANAGER)), "--kubeconfig", str(self._kubeconfig("controller-manager")),
                "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
                "--use-service-account-credentials=false", "--leader-elect=false", "--bind-address", "127.0.0.1",
                "--secure-port", str(self.ports.port()), "--controllers", "*,-nodeipam,-service-lb-controller,"
                "-cloud-node-lifecycle,-route", "--node-monitor-grace-period", "40s", "-v", "0"],
            kubenode.SCHEDULER: [str(b.path(kubenode.SCHEDULER)), "--kubeconfig", str(self._kubeconfig("scheduler")),
                                 "--leader-elect=false", "--bind-address", "127.0.0.1",
                                 "--secure-port", str(self.ports.port()), "-v", "0"],
        }
        for name, argv in argvs.items():
            self.daemons[name] = ManagedProcess(name, argv, self.run_dir / f"{name}.log").start()
        self.daemons[kubenode.KUBELET].wait_ready(
            HttpReady(f"http://{configs.NODE}:10248/healthz", timeout_s=60),
            hint=f"the kubelet's log is {self.run_dir / 'kubelet.log'}")

    def _wait_node_ready(self) -> None:
        from lightkube.resources.core_v1 import Node as NodeObject

        client = self.plane.client()
        last = {"why": "not registered yet"}

        def ready() -> bool:
            for dead in (p for p in self.processes().values() if not p.is_running()):
                raise RuntimeError(f"{dead.name} exited ({dead.returncode()}):\n{dead.log_tail(20)}")
            try:
                node = client.get(NodeObject, configs.NODE)
            except Exception:  # noqa: BLE001 - not registered yet
                return False
            for c in node.status.conditions or []:
                if c.type == "Ready":
                    last["why"] = f"{c.reason}: {c.message}"
                    return c.status == "True"
            return False

        try:
            poll(ready, timeout_s=NODE_READY_S, interval_s=0.1,
                 describe=lambda: f"node {configs.NODE} Ready (last: {last['why']})")
        finally:
            client.close()

    # -- inspection -----------------------------------------------------------------------------
    def processes(self) -> dict[str, ManagedProcess]:
        procs = dict(self.plane.processes()) if self.plane else {}
        if self.containerd is not None:
            procs["containerd"] = self.containerd
        procs.update(self.daemons)
        return procs

    def state(self) -> dict:
        return {"server": self.plane.server if self.plane else "", "node": configs.NODE,
                "kubeconfig": str(self.layout.kubeconfig), "containerd": str(self.layout.containerd_socket),
                "pids": {name: p.pid for name, p in self.processes().items()}, "phases": self.phases,
                "supervisor": os.getpid()}

    # -- stop -----------------------------------------------------------------------------------
    def stop(self) -> None:
        kubelet = self.daemons.pop(kubenode.KUBELET, None)
        if kubelet is not None:
            kubelet.stop(grace_s=5.0)
        if self.containerd is not None and self.containerd.is_running():
            self._remove_containers()
        for proc in self.daemons.values():
            proc.stop(grace_s=3.0)
        self.daemons.clear()
        if self.containerd is not None:
            self.containerd.stop(grace_s=5.0)
        kill_shims(self.layout)
        podnet.down()
        podnet.clear(self.layout.pins, self.layout.blocks)
        if self.plane is not None:
            self.plane.stop()
        for cgroup in cgroup_dirs():
            remove_cgroup(cgroup)

    def _remove_containers(self) -> None:
        ctr = images.ctr(self.layout.containerd_socket)
        listed = subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, timeout=30)
        for task in listed.stdout.split():
            subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", task], capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        for task in listed.stdout.split():
            while time.monotonic() < deadline and subprocess.run(
                    [*ctr, "tasks", "delete", task], capture_output=True, timeout=30).returncode != 0:
                time.sleep(0.1)
        listed = subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True, text=True, timeout=30)
        for container in listed.stdout.split():
            subprocess.run([*ctr, "containers", "delete", container], capture_output=True, timeout=30)


def shims(layout: Layout) -> list[int]:
    """The containerd shims of this cluster still running (a shim outlives containerd by design)."""
    socket = str(layout.containerd_socket)
    return [pid for pid in procfs.pids()
            if (argv := procfs.argv(pid)) and argv[0].endswith("containerd-shim-runc-v2") and socket in argv]


def kill_shims(layout: Layout) -> None:
    for pid in shims(layout):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def remove_cgroup(folder: Path) -> None:
    """Remove a cgroup tree, deepest first (a cgroup folder goes with rmdir, never with its files)."""
    if not folder.is_dir():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        folder.rmdir()
    except OSError:
        pass


def read_state(layout: Layout) -> dict | None:
    try:
        return json.loads(layout.state.read_text())
    except (OSError, ValueError):
        return None
