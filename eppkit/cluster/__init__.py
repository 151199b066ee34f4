"""A one-node Kubernetes cluster on this machine, from the kit's cache: ``eppkit cluster up|down|status``.

One cluster per machine (the kubelet's node name and some of its paths are the machine's): its supervisor
(:mod:`eppkit.cluster.supervisor`) runs containerd, etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
the kubelet in a mount namespace of its own, and outlives the command that started it until ``down``. Its state,
images and logs live in ``<cache>/k8s``; its admin kubeconfig is ``<cache>/k8s/admin.kubeconfig``.

What it needs from the machine is checked first (:func:`missing`): root, containerd with runc, the CNI plugins,
cgroups, ``unshare`` and the binaries ``eppkit bootstrap --kubernetes`` builds. Nothing of it touches the host's
network: the kubelet and every daemon listen on 127.0.0.1, pods use the host's network (hostNetwork), no iptables
chain is written and no forwarding turned on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from eppkit.builds import kubenode
from eppkit.cluster import podnet
from eppkit.cluster.configs import CNI_BIN, Layout
from eppkit.cluster.node import cgroup_dirs, read_state, shims
from eppkit.core import procfs
from eppkit.core.paths import cache_dir, cache_lock
from eppkit.core.procfs import SESSION_TAG

UP_TIMEOUT_S = 300.0
DOWN_TIMEOUT_S = 60.0
PACKAGES = "apt-get install containerd runc containernetworking-plugins"


class ClusterError(RuntimeError):
    """The cluster cannot start or stop; the message says what is missing and what to do (a few lines)."""


def layout() -> Layout:
    return Layout(cache_dir() / "k8s")


def missing() -> list[str]:
    """What this machine lacks for the one-node cluster, in a few words each ([] when nothing)."""
    lacks = []
    if os.geteuid() != 0:
        lacks.append("root")
    for tool in ("containerd", "runc", "ctr", "unshare", "mount", "ip"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            lacks.append(tool)
    if podnet.plugins_missing(CNI_BIN):
        lacks.append(f"the CNI plugins in {CNI_BIN}")
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists() and not all(
            Path("/sys/fs/cgroup", c).is_dir() for c in ("cpu", "cpuset", "memory", "pids")):
        lacks.append("cgroups cpu, cpuset, memory and pids")
    if kubenode.find() is None:
        lacks.append("the kubelet and its peers (eppkit bootstrap --kubernetes)")
    return lacks


def missing_error(lacks: list[str]) -> ClusterError:
    """The three-line error of a machine without what the cluster needs."""
    return ClusterError(
        f"cannot start the one-node Kubernetes cluster here: {', '.join(lacks)} missing.\n"
        f"It needs root, containerd >= 1.6 with runc and the CNI plugins ({PACKAGES}), cgroups, and "
        "`eppkit bootstrap --kubernetes`.\n"
        "Or point the kit at a cluster of your own (--kubeconfig FILE, docs/kubernetes.md), or run the same testbed "
        "on --runtime docker or local.")


def running() -> dict | None:
    """The running cluster's state (server, kubeconfig, pids, start phases), or None."""
    state = read_state(layout())
    if state and state.get("ready") and procfs.alive(int(state.get("supervisor", 0))):
        return state
    return None


def up(progress=print) -> dict:
    """Start the cluster unless it runs; its state. ClusterError saying why when it cannot."""
    lay = layout()
    lay.home.mkdir(parents=True, exist_ok=True)
    with cache_lock(lay.home / "cluster.lock"):
        state = running()
        if state is not None:
            return state
        lacks = missing()
        if lacks:
            raise missing_error(lacks)
        _clear_leftovers(lay)
        lay.state.unlink(missing_ok=True)
        log = lay.home / "supervisor.log"
        env = {k: v for k, v in os.environ.items() if k != SESSION_TAG}
        progress("cluster: starting containerd, etcd, kube-apiserver, kube-controller-manager, kube-scheduler and "
                 "the kubelet ...")
        started = time.monotonic()
        with log.open("ab") as out:
            proc = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", "--", sys.executable, "-m",
                                     "eppkit.cluster.supervisor", str(lay.home)], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd="/")
        while time.monotonic() - started < UP_TIMEOUT_S:
            state = read_state(lay) or {}
            if state.get("ready"):
                progress(f"cluster: node Ready in {time.monotonic() - started:.1f} s ({state['server']}; "
                         f"kubeconfig {state['kubeconfig']})")
                return state
            if state.get("failed") or proc.poll() is not None:
                proc.wait(timeout=DOWN_TIMEOUT_S)
                raise ClusterError(f"the cluster did not start: {state.get('failed') or f'exit {proc.returncode}'}\n"
                                   f"--- {log} (last lines) ---\n{_tail(log)}")
            time.sleep(0.05)
        _stop_supervisor(proc.pid)
        raise ClusterError(f"the cluster was not Ready within {UP_TIMEOUT_S:.0f} s.\n--- {log} ---\n{_tail(log)}")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _stop_supervisor(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while procfs.alive(pid) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    if procfs.alive(pid):
        os.kill(pid, signal.SIGKILL)


def down(progress=print) -> list[str]:
    """Stop the cluster (nothing when none runs); what it left behind, removed ([] when nothing)."""
    lay = layout()
    lay.home.mkdir(parents=True, exist_ok=True)
    with cache_lock(lay.home / "cluster.lock"):
        state = read_state(lay)
        if state and procfs.alive(int(state.get("supervisor", 0))):
            progress("cluster: stopping ...")
            started = time.monotonic()
            _stop_supervisor(int(state["supervisor"]))
            progress(f"cluster: stopped in {time.monotonic() - started:.1f} s")
        lay.state.unlink(missing_ok=True)
        return _clear_leftovers(lay)


def leftovers(lay: Layout | None = None) -> list[str]:
    """What a stopped cluster left on the machine: shims, cgroups, daemons ([] when nothing)."""
    lay = lay or layout()
    found = [f"containerd shim pid {pid}" for pid in shims(lay)]
    found += [f"cgroup {c}" for c in cgroup_dirs() if c.exists()]
    if lay.containerd_socket.exists():
        found.append(f"containerd's socket {lay.containerd_socket}")
    if podnet.exists():
        found.append(f"the pod network's bridge {podnet.BRIDGE}")
    return found


def _clear_leftovers(lay: Layout) -> list[str]:
    from eppkit.cluster.node import kill_shims, remove_cgroup

    found = leftovers(lay)
    if found:
        kill_shims(lay)
        for cgroup in cgroup_dirs():
            remove_cgroup(cgroup)
        if lay.containerd_socket.exists() and running() is None:
            lay.containerd_socket.unlink(missing_ok=True)
        podnet.down()
    return found
