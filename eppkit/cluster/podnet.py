"""The node's pod network, for Pods that are not on the host's network (an InferencePool's Pods: each needs an
address of its own, which hostNetwork Pods, all at the node's address, cannot have).

A bridge on this machine, ``eppkit0``, holding ``10.233.0.1/16``: the host's address on it, and the one route the
cluster adds (a connected one, to the bridge). Each Pod on it gets a veth from the CNI bridge plugin and the address
the kit chose for it: the kit's IPAM plugin (a few lines of sh, :data:`IPAM_SCRIPT`) reads it from a file named
after the Pod (:func:`pin`), because an address is part of a testbed's plan before its Pod exists. A Pod with no
pinned address (one the kit makes as on a cluster of your own, where Pods learn their addresses: a testbed given
this cluster's kubeconfig) gets one from Debian's ``host-local`` plugin, in :data:`FREE_RANGE`. Each testbed
reserves a block of 253 addresses (``10.233.<block>.2`` upwards, :class:`Blocks`), so parallel sessions never
collide. No gateway, no masquerading, no forwarding: traffic stays between the host and its own Pods' namespaces
(the bridge plugin, without ``isGateway``, turns on no ``ip_forward`` and writes no iptables rule).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from pathlib import Path

BRIDGE = "eppkit0"
SUBNET = ipaddress.ip_network("10.233.0.0/16")
HOST = "10.233.0.1"  # the host's address on the bridge: where a Pod reaches what runs on the host's network
BLOCKS = range(1, 255)  # 10.233.<block>.0/24 per testbed; block 0 holds the host's address
FREE_RANGE = ("10.233.255.1", "10.233.255.254")  # a Pod with no address pinned: host-local's (block 255 is no testbed's)
PER_BLOCK = 253  # .2 .. .254

IPAM = "eppkit-ipam"
IPAM_SCRIPT = """#!/bin/sh
# The kit's CNI IPAM plugin: the address pinned for this Pod (eppkit/cluster/podnet.py), else host-local's next
# free one in 10.233.255.0/24 (a Pod that learns its address, as on any cluster).
pins="{pins}"
free='{{"cniVersion":"1.0.0","name":"eppkit","ipam":{{"type":"host-local","dataDir":"{leased}","ranges":[[{{"subnet":"{subnet}","rangeStart":"{start}","rangeEnd":"{end}"}}]]}}}}'

ns=""; pod=""
IFS=';'
for kv in $CNI_ARGS; do
  case "$kv" in K8S_POD_NAMESPACE=*) ns="${{kv#*=}}";; K8S_POD_NAME=*) pod="${{kv#*=}}";; esac
done
case "$CNI_COMMAND" in
  ADD)
    if ip=$(cat "$pins/${{ns}}_${{pod}}" 2>/dev/null); then
      printf '{{"cniVersion":"1.0.0","ips":[{{"address":"%s/{prefix}"}}]}}' "$ip"
    else
      printf '%s' "$free" | "{bin}/host-local"
    fi;;
  DEL) printf '%s' "$free" | "{bin}/host-local";;
  VERSION) printf '{{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}}';;
  *) :;;
esac
"""
PLUGINS = ("bridge", "loopback", "host-local")  # Debian's, beside the kit's IPAM in the CNI bin folder


class PodNetworkError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def plugins_missing(debian_bin: Path) -> str | None:
    """What of Debian's CNI plugins is missing from ``debian_bin``, and how to get it; None when all are there."""
    missing = [name for name in PLUGINS if not (debian_bin / name).is_file()]
    if not missing:
        return None
    return (f"the CNI plugins {', '.join(missing)} are not in {debian_bin}: apt-get install "
            "containernetworking-plugins (Debian's; the one-node cluster's pod network uses them)")


def install_plugins(bin_dir: Path, pins: Path, debian_bin: Path) -> None:
    """The CNI bin folder containerd reads: Debian's bridge and loopback, and the kit's IPAM."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    pins.mkdir(parents=True, exist_ok=True)
    for name in PLUGINS:
        link = bin_dir / name
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(debian_bin / name)
    script = bin_dir / IPAM
    script.write_text(IPAM_SCRIPT.format(pins=pins, prefix=SUBNET.prefixlen, leased=leased(pins), subnet=SUBNET,
                                         start=FREE_RANGE[0], end=FREE_RANGE[1], bin=bin_dir))
    script.chmod(0o755)


def exists() -> bool:
    return _ip("link", "show", BRIDGE, check=False).returncode == 0


def conflicts() -> list[str]:
    """Routes of this machine's other interfaces that overlap the pod subnet (the bridge would shadow them)."""
    routes = json.loads(_ip("-j", "route", "show", "table", "all").stdout or "[]")
    found = []
    for route in routes:
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dev == BRIDGE or dst in ("", "default") or ":" in dst:
            continue
        try:
            net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        except ValueError:
            continue
        if net.overlaps(SUBNET) and not net.is_loopback:
            found.append(f"{dst} dev {dev}")
    return found


def up() -> None:
    """The bridge with the host's address, up (kept when there already)."""
    clash = conflicts()
    if clash:
        raise PodNetworkError(f"the pod network {SUBNET} overlaps this machine's routes ({', '.join(clash)}): the "
                              "cluster would shadow them, so it does not start.\nStop what uses that range, or run "
                              "the kit against another cluster (docs/kubernetes.md).")
    if not exists():
        _ip("link", "add", BRIDGE, "type", "bridge")
    if HOST not in _ip("-o", "addr", "show", "dev", BRIDGE).stdout:
        _ip("addr", "add", f"{HOST}/{SUBNET.prefixlen}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def down() -> None:
    """The bridge removed (its Pods' veths went with their namespaces)."""
    if exists():
        _ip("link", "del", BRIDGE, check=False)


# -- addresses --------------------------------------------------------------------------------------------------
def pin(pins: Path, namespace: str, pod: str, address: str) -> None:
    """What the IPAM plugin gives Pod ``namespace/pod``."""
    if ipaddress.ip_address(address) not in SUBNET:
        raise ValueError(f"pod address {address} is outside the pod network {SUBNET}")
    (pins / f"{namespace}_{pod}").write_text(address)


def unpin(pins: Path, namespace: str, pod: str) -> None:
    (pins / f"{namespace}_{pod}").unlink(missing_ok=True)


def leased(pins: Path) -> Path:
    """host-local's leases (Pods with no pinned address), beside the pins."""
    return pins.parent / "pod-leases"


def clear(pins: Path, blocks: Path) -> None:
    """Every pin, lease and block reservation gone (the cluster starts or stops: no testbed holds any)."""
    shutil.rmtree(leased(pins), ignore_errors=True)
    for folder in (pins, blocks):
        for path in folder.glob("*") if folder.is_dir() else []:
            path.unlink(missing_ok=True)


class Blocks:
    """Each testbed's block of addresses, reserved by a file made exclusively (sessions and workers share them)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def reserve(self, owner: str) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        for block in BLOCKS:
            try:
                fd = os.open(self.folder / str(block), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as out:
                out.write(owner)
            return block
        raise PodNetworkError(f"all {len(BLOCKS)} address blocks of the pod network are reserved ({self.folder}): "
                              "`eppkit cluster down` frees what stopped sessions left")

    def release(self, block: int) -> None:
        (self.folder / str(block)).unlink(missing_ok=True)

    def release_owned(self, owners: set[str]) -> None:
        for path in self.folder.glob("*") if self.folder.is_dir() else []:
            try:
                if path.read_text() in owners:
                    path.unlink(missing_ok=True)
            except OSError:
                pass



def address(block: int, index: int) -> str:
    """Pod ``index`` of a testbed's block: 10.233.<block>.2 upwards."""
    if not 0 <= index < PER_BLOCK:
        raise ValueError(f"pod index {index} has no address in a block of {PER_BLOCK}")
    return str(SUBNET.network_address + (block << 8) + index + 2)


class BlockPods:
    """Where a testbed's pool Pods are on this runtime: its block of the pod network (what
    :class:`eppkit.components.inference_pool.LoopbackPods` is on the others)."""

    learned = False  # each address planned before its pod starts

    def __init__(self, block: int) -> None:
        self.block = block

    def address(self, index: int) -> str:
        return address(self.block, index)

    def check(self, ip: str) -> str:
        try:
            inside = ipaddress.ip_address(ip) in ipaddress.ip_network(f"{address(self.block, 0)}/24", strict=False)
        except ValueError:
            inside = False
        if not inside:
            raise ValueError(f"pod address {ip!r} is outside this testbed's block of the pod network "
                             f"({address(self.block, 0)} to {address(self.block, PER_BLOCK - 1)}); leave it out "
                             "and the kit picks the next free one")
        return ip

    def shared_port(self, ports, hosts: list[str]) -> int:
        """Any port: each Pod has its own network namespace (one free on loopback, so nothing here clashes)."""
        return ports.port()


def forget(address: str) -> None:
    """The host's neighbour entry for ``address`` dropped: a Pod that had it before had another MAC address."""
    _ip("neigh", "del", address, "dev", BRIDGE, check=False)
