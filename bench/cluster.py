"""What the one-node cluster of ``--runtime kubernetes`` costs: its daemons' memory, Pods per second, and what
one more pool Pod costs a test (``eppkit cluster up`` first).

    python -m bench.cluster                      # 16 Pods at once, then 8 pool pods one after another
    python -m bench.cluster --burst 32 --adds 4 --json bench/results/cluster.json
    python -m bench.cluster --burst 2 --adds 1 --forward 500       # mostly the port forward

- **memory**: the RSS of each daemon (containerd, etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
  kubelet), the node's pods' cgroup (every sandbox and container) and the shims, idle and with the burst running;
- **pods per second, a burst**: ``--burst`` mock vLLM Pods on the pod network created at once (each its own
  address), until each answers ``/health`` from the host, then until each is Ready in the API (its kubelet's probe
  and the gate), then deleted until none runs;
- **one more pool pod**: a gaie-epp testbed (GAIE's EPP in-cluster), then ``bed.pool.add_pod()`` ``--adds`` times:
  each returns once its mock answers, its Pod is Ready and Envoy routes to it (what a churn test waits for);
- **one more pool pod on a cluster of your own** (the kit's, by its kubeconfig): the same, ``--remote`` times, its
  Pods where the network puts them and Envoy's endpoints a live ConfigMap; then as many changes of that ConfigMap
  alone, without touching Envoy's Pod, until Envoy holds each (what the touch saves: the kubelet's periodic sync);
- **a port forwarded through the API server** (what the host's requests cross on a cluster of your own whose node is
  another machine, :mod:`eppkit.cluster.portforward`): one mock Pod on the pod network, ``--forward`` requests to its
  ``/health`` straight at its address and through the forward, each on a new connection and all on one kept open,
  in turn in one run: the forward's cost per connection and per request.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.lifecycle import summary
from bench.system import loadavg, machine, memory_kib
from eppkit import cluster
from eppkit.cluster import namespaces, node, podnet
from eppkit.cluster.pod import ManagedPod
from eppkit.components.inference_pool import READY_GATE
from eppkit.flows._servers import instance
from eppkit.runtimes import create
from eppkit.runtimes.common import service_in_image
from eppkit.runtimes.kubernetes import KubernetesLauncher
from eppkit.topology import Topology, VllmSpec


def daemons_mib() -> dict[str, float]:
    state = cluster.running() or {}
    out = {name: round(memory_kib(pid).get("VmRSS", 0) / 1024, 1) for name, pid in state.get("pids", {}).items()}
    lay = cluster.layout()
    out["shims"] = round(sum(memory_kib(pid).get("VmRSS", 0) for pid in node.shims(lay)) / 1024, 1)
    pods_cgroup = Path("/sys/fs/cgroup/memory") / node.CGROUP_ROOT / "memory.usage_in_bytes"  # cgroup v1
    if not pods_cgroup.exists():
        pods_cgroup = Path("/sys/fs/cgroup") / node.CGROUP_ROOT / "memory.current"  # v2
    out["pods (cgroup)"] = round(int(pods_cgroup.read_text()) / 2**20, 1) if pods_cgroup.exists() else None
    return out


def burst(launcher: KubernetesLauncher, run_dir: Path, n: int) -> dict:
    """``n`` mock Pods on the pod network at once: created, serving, Ready, then deleted."""
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import PatchType

    bed = create(Topology(mode="direct"), "kubernetes", run_dir=run_dir)  # for the mock's spec and env only
    addresses = launcher.pod_addresses(run_dir)
    namespace = launcher._namespace(run_dir)
    image = launcher.cluster.image(launcher._images.images().services)
    pods = []
    for i in range(n):
        spec, _ = instance(bed.topology, bed.ports, f"burst-{i}", "both", bed.topology.vllm[0].model, [],
                           host=addresses.address(i), port=8000)
        made = service_in_image(spec, {}, run_dir, [], lambda name, argv, log: ManagedPod(
            name, image, argv, log, namespace=namespace))
        pods.append(made.on_pod_network(addresses.address(i), ready_path="/health", port=8000))
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda p: p.start(), pods))
    created = time.monotonic() - t0

    def serving(pod: ManagedPod) -> bool:
        try:
            return requests.get(f"http://{pod.address}:8000/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    waiting = set(range(n))
    while waiting and time.monotonic() - t0 < 120:
        waiting = {i for i in waiting if not serving(pods[i])}
        time.sleep(0.05)
    served = time.monotonic() - t0
    memory = daemons_mib()
    client = launcher.cluster.client()
    for pod in pods:  # Ready needs the gate too (bed.pool sets it when a pod joins the pool)
        client.patch(Pod.Status, pod.pod_name, {"status": {"conditions": [{"type": READY_GATE, "status": "True"}]}},
                     namespace=namespace, patch_type=PatchType.STRATEGIC)
    while time.monotonic() - t0 < 180:
        listed = client.list(Pod, namespace=namespace)
        if sum(1 for p in listed if any(c.type == "Ready" and c.status == "True"
                                        for c in (p.status.conditions or []))) >= n:
            break
        time.sleep(0.1)
    ready = time.monotonic() - t0
    t1 = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda p: p.stop(grace_s=2.0), pods))
    namespaces.delete_namespace(namespace, client, wait_s=60)
    removed = time.monotonic() - t1
    launcher.release(run_dir)
    bed.ports.release()
    return {"pods": n, "created_s": round(created, 2), "all_serving_s": round(served, 2),
            "all_ready_s": round(ready, 2), "pods_per_s_serving": round(n / served, 2),
            "deleted_s": round(removed, 2), "memory_mib_with_burst": memory}


def adds(run_dir: Path, n: int) -> dict:
    with create(Topology(mode="gaie-epp", vllm=[VllmSpec(name="vllm-0"), VllmSpec(name="vllm-1")]), "kubernetes", run_dir=run_dir) as bed:
        times = []
        for _ in range(n):
            t0 = time.monotonic()
            bed.pool.add_pod()
            times.append(time.monotonic() - t0)
    return {"adds": summary(times)}


def by_kubeconfig(run_dir: Path, n: int) -> dict:
    """The same gaie-epp testbed on the cluster given by its kubeconfig (a cluster of your own, eppkit.cluster.remote:
    pool Pods where its network puts them, Envoy's endpoints a live ConfigMap): ``bed.pool.add_pod()`` ``n`` times;
    then 2``n`` changes of Envoy's endpoints (a pod out, back in), each timed until Envoy holds it, the same again
    with the ConfigMap changed alone, its Pod not touched (apipod.update_live, refresh's first half): what the touch saves (the
    kubelet's periodic sync otherwise)."""
    from eppkit.cluster import apipod, handle
    from eppkit.gateway import eds

    own = handle.named(cluster.running()["kubeconfig"])  # passed down to the testbed's Pods (and their leftovers)
    with create(Topology(mode="gaie-epp", vllm=[VllmSpec(name="vllm-0"), VllmSpec(name="vllm-1")]), "kubernetes",
                run_dir=run_dir, cluster=own) as bed:
        touched = []
        for _ in range(n):
            t0 = time.monotonic()
            bed.pool.add_pod()
            touched.append(time.monotonic() - t0)
        real, untouched, with_touch = apipod.refresh, [], []

        def change(pod: str, into: list) -> None:  # Envoy without ``pod``, then all again: two changes
            for leaving in (pod, None):
                t0 = time.monotonic()
                bed.pool.sync_envoy(wait=False, leaving=leaving)
                eds.wait_applied(bed.envoy_admin_url, "picked", bed.pool.endpoints(leaving=leaving), timeout_s=180)
                into.append(time.monotonic() - t0)

        for pod in [p.name for p in bed.pool.pods()][:n]:
            change(pod, with_touch)

        apipod.refresh = lambda client, pod, namespace, config_map, folder: apipod.update_live(
            client, namespace, config_map, folder)
        try:
            for pod in [p.name for p in bed.pool.pods()][:n]:
                change(pod, untouched)
        finally:
            apipod.refresh = real
    return {"adds_by_kubeconfig": summary(touched), "endpoints_changed": summary(with_touch),
            "endpoints_changed_without_the_touch": summary(untouched)}


def forward(launcher: KubernetesLauncher, run_dir: Path, n: int) -> dict:
    """Requests to one mock Pod straight and through a port forward (module docstring), p50 of each way in ms."""
    import http.client

    from eppkit.cluster.portforward import ApiAccess, PortForward

    bed = create(Topology(mode="direct"), "kubernetes", run_dir=run_dir)  # for the mock's spec and env only
    address = launcher.pod_addresses(run_dir).address(0)
    # on every address of its Pod: the forward dials the port on the Pod's loopback
    spec, _ = instance(bed.topology, bed.ports, "forwarded", "both", bed.topology.vllm[0].model, [], host="0.0.0.0",
                       port=8000)
    image = launcher.cluster.image(launcher._images.images().services)
    pod = service_in_image(spec, {}, run_dir, [], lambda name, argv, log: ManagedPod(
        name, image, argv, log, namespace=launcher._namespace(run_dir))).on_pod_network(address, ready_path="/health",
                                                                                     port=8000).start()
    through = PortForward(ApiAccess.from_kubeconfig(cluster.running()["kubeconfig"]), pod.namespace, pod.pod_name,
                          8000).start()
    ways = {"straight": (address, 8000), "forwarded": ("127.0.0.1", through.local_port)}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{address}:8000/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        times: dict[str, list[float]] = {f"{way}, {kind}": [] for way in ways for kind in ("new connection", "kept")}
        kept = {way: http.client.HTTPConnection(*where, timeout=10) for way, where in ways.items()}
        for _ in range(n):
            for way, where in ways.items():  # in turn: both ways see the same machine
                for kind, conn in (("new connection", http.client.HTTPConnection(*where, timeout=10)),
                                   ("kept", kept[way])):
                    t0 = time.perf_counter()
                    conn.request("GET", "/health")
                    conn.getresponse().read()
                    times[f"{way}, {kind}"].append((time.perf_counter() - t0) * 1000)
                    if kind == "new connection":
                        conn.close()
        for conn in kept.values():
            conn.close()
    finally:
        through.close()
        pod.stop(grace_s=2.0)
        launcher.release(run_dir)
        bed.ports.release()
    return {"requests": n, "p50_ms": {k: round(sorted(v)[len(v) // 2], 2) for k, v in times.items()},
            "forward_errors": through.errors[:3]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--adds", type=int, default=8)
    parser.add_argument("--forward", type=int, default=200, help="requests each way through the port forward")
    parser.add_argument("--remote", type=int, default=4, help="pool changes on the cluster by its kubeconfig, each way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if cluster.running() is None:
        print("the one-node cluster is not running: `eppkit cluster up` first", file=sys.stderr)
        return 2
    if args.burst > podnet.PER_BLOCK:
        parser.error(f"--burst is at most {podnet.PER_BLOCK} (one testbed's block of addresses)")
    result = {"machine": machine(), "load_before": loadavg(), "memory_mib_idle": daemons_mib()}
    with tempfile.TemporaryDirectory(prefix="eppkit-bench-cluster-") as work:
        stamp = time.strftime("%H%M%S")  # a namespace per run folder: a name still terminating cannot be reused
        result["burst"] = burst(KubernetesLauncher(), Path(work) / f"bench-burst-{stamp}", args.burst)
        result.update(adds(Path(work) / f"bench-adds-{stamp}", args.adds))
        result.update(by_kubeconfig(Path(work) / f"bench-remote-{stamp}", args.remote))
        result["forward"] = forward(KubernetesLauncher(), Path(work) / f"bench-forward-{stamp}", args.forward)
    result["load_after"] = loadavg()
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
