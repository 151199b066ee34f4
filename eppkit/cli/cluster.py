"""`eppkit cluster up|down|status|images`: the one-node Kubernetes cluster (eppkit.cluster), and the images a
cluster of your own pulls (eppkit.cluster.remote)."""

from __future__ import annotations

import argparse
import sys

from eppkit.core.progress import printer

ACTIONS = ("up", "down", "status", "images")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="up: start it (unless it runs); down: stop it and remove what "
                        "it left; status: where it is and what runs on it; images: the kit's images (made or found "
                        "now), one per line, for a cluster of your own to pull: kind load docker-image $(eppkit "
                        "cluster images)")
    parser.add_argument("--check", action="store_true", help="down: exit 1 if the stopped cluster had left anything "
                        "(processes, cgroups, its socket), naming it")


_say = printer("cluster", stdout=True)  # its output is what it did


def main(args: argparse.Namespace) -> int:
    from eppkit import cluster

    try:
        if args.action == "up":
            state = cluster.up(_say)
            _say(f"kubectl --kubeconfig {state['kubeconfig']} get nodes")
            return 0
        if args.action == "down":
            left = cluster.down(_say)
            if left:
                _say("it had left (now removed): " + "; ".join(left))
                return 1 if args.check else 0
            _say("nothing left behind")
            return 0
        if args.action == "images":
            return images()
        return status()
    except cluster.ClusterError as exc:
        print(f"eppkit cluster {args.action}: {exc}", file=sys.stderr)
        return 2


def status() -> int:
    from eppkit import cluster

    state = cluster.running()
    if state is None:
        lacks = cluster.missing()
        _say("not running" + (f"; this machine lacks {', '.join(lacks)}" if lacks else "; `eppkit cluster up` starts it"))
        return 1
    from lightkube.resources.core_v1 import Node, Pod

    from eppkit.cluster.handle import KitCluster

    client = KitCluster().client()
    for node in client.list(Node):
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        _say(f"node {node.metadata.name}: Ready={ready.status if ready else '?'} "
             f"({node.status.nodeInfo.kubeletVersion}, {node.status.nodeInfo.containerRuntimeVersion})")
    pods = list(client.list(Pod, namespace="*"))
    by_ns: dict[str, int] = {}
    for pod in pods:
        by_ns[pod.metadata.namespace] = by_ns.get(pod.metadata.namespace, 0) + 1
    _say(f"api {state['server']}; kubeconfig {state['kubeconfig']}; started in {state.get('start_s')} s")
    _say("pods: " + (", ".join(f"{ns} {n}" for ns, n in sorted(by_ns.items())) or "none"))
    return 0


def images() -> int:
    """The tags of the images the kubernetes runtime's Pods run (Envoy the one installed with eppkit), one per line
    on stdout; what making them printed goes to stderr."""
    from eppkit.runtimes.kubernetes import pod_images

    for tag in pod_images():
        print(tag)
    return 0
