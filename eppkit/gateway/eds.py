"""Envoy's endpoints for a pool that changes during a test: one EDS file per cluster, rewritten after each change.

A gateway in a Kubernetes cluster learns an InferencePool's endpoints from its controller; the kit's testbed
plays that controller. After each change it makes to the pool (:mod:`eppkit.runtimes.pool`) it writes the
pods the pool selects, on its target ports, into these files; Envoy's ``picked`` cluster and the pool's
round-robin cluster read them (envoy/_endpoints.j2). Envoy reloads the files when one is renamed into their
folder (``path_config_source`` with ``watched_directory``), so each write is a write-then-rename.

Not-ready pods stay listed: which of them may serve is the EPP's decision, and Envoy follows it (a pick
outside these endpoints is skipped, see envoy/_picked.j2).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

import requests

from eppkit.core.polling import poll

FOLDER = "eds"  # in the run folder (mounted into Envoy's container on the docker runtime)
TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"


def assignment(cluster: str, addresses: Iterable[tuple[str, int]]) -> dict:
    endpoints = [{"endpoint": {"address": {"socket_address": {"address": host, "port_value": int(port)}}}}
                 for host, port in addresses]
    return {"@type": TYPE, "cluster_name": cluster, "endpoints": [{"lb_endpoints": endpoints}] if endpoints else []}


def write(folder: Path, clusters: dict[str, list[tuple[str, int]]], version: int) -> None:
    """One file per cluster (``<cluster>.json``), each replaced at once by a rename."""
    folder.mkdir(parents=True, exist_ok=True)
    for cluster, addresses in clusters.items():
        target = folder / f"{cluster}.json"
        partial = folder / f".{cluster}.json.partial"
        partial.write_text(json.dumps({"version_info": str(version), "resources": [assignment(cluster, addresses)]}))
        os.replace(partial, target)


def cluster_hosts(admin_url: str, cluster: str) -> set[str]:
    """The ``host:port`` of every endpoint Envoy's admin lists for ``cluster`` now."""
    text = requests.get(f"{admin_url}/clusters", timeout=2).text
    pattern = re.compile(rf"^{re.escape(cluster)}::([0-9.]+:\d+)::cx_active::", re.M)
    return set(pattern.findall(text))


def wait_applied(admin_url: str, cluster: str, addresses: Iterable[tuple[str, int]], timeout_s: float = 10.0) -> None:
    """Until Envoy's ``cluster`` holds exactly ``addresses`` (PollTimeout naming both sides otherwise)."""
    wanted = {f"{host}:{port}" for host, port in addresses}
    poll(lambda: cluster_hosts(admin_url, cluster), lambda hosts: hosts == wanted, timeout_s=timeout_s,
         interval_s=0.02, retry_on=(requests.RequestException,),
         describe=f"Envoy's cluster {cluster} with the pool's endpoints {sorted(wanted)}")
