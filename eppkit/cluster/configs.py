"""What the one-node cluster's daemons are told: containerd's config, the CNI network and the kubelet's config (their
kubeconfigs are the control plane's, :func:`eppkit.components.pki.kubeconfig_text`). Pure functions of a
:class:`Layout`, so a unit test reads each one whole."""

from __future__ import annotations

import json
from pathlib import Path

from eppkit.cluster import podnet

NODE = "127.0.0.1"  # the Node's name, and its Hostname address: the API server reaches the kubelet on loopback
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins


class Layout:
    """Where one cluster keeps its state: ``home`` in the kit's cache (images persist across up and down), ``run``
    under /run (containerd's state and socket; gone at reboot)."""

    def __init__(self, home: Path, run: Path = Path("/run/eppkit")) -> None:
        self.home, self.run = Path(home), Path(run)
        self.containerd_root = self.home / "containerd"
        self.containerd_state = self.run / "containerd"
        self.containerd_socket = self.containerd_state / "containerd.sock"
        self.kubelet_root = self.home / "kubelet"
        self.pod_logs = self.home / "pod-logs"
        self.cni_conf = self.home / "cni" / "net.d"
        self.cni_bin = self.home / "cni" / "bin"  # Debian's plugins and the kit's IPAM (eppkit.cluster.podnet)
        self.pins = self.run / "pod-addresses"  # pod -> its address, read by the IPAM plugin
        self.blocks = self.run / "pod-blocks"  # each testbed's block of addresses
        self.plane = self.home / "plane"  # the control plane's certificates, etcd's data
        self.state = self.home / "state.json"  # the supervisor's: ready or failed, the server, the pids
        self.kubeconfig = self.home / "admin.kubeconfig"  # what `eppkit cluster status`, the launcher and users read


def containerd_toml(layout: Layout, pause_image: str) -> str:
    """containerd 1.6's config (keys from its docs/cri/config.md): its own root, state and socket; the pause
    image the kit imported; oom_score_adj left alone (CAP_SYS_RESOURCE may be missing: runc's "can't get final
    child's PID from pipe" otherwise); no AppArmor profile loaded; Debian's CNI plugins."""
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.grpc.v1.cri.btrfs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{layout.containerd_socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  max_container_log_line_size = 262144
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{layout.cni_bin}"
    conf_dir = "{layout.cni_conf}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def cni_conflist(layout: Layout) -> str:
    """The pod network (:mod:`eppkit.cluster.podnet`): the bridge ``eppkit0``, without a gateway or masquerading
    (the plugin then turns on no forwarding and writes no iptables rule), each Pod at the address the kit pinned."""
    return json.dumps({"cniVersion": "1.0.0", "name": "eppkit", "plugins": [{
        "type": "bridge", "bridge": podnet.BRIDGE, "isGateway": False, "ipMasq": False, "hairpinMode": False,
        "ipam": {"type": podnet.IPAM}}]}, indent=1) + "\n"


def kubelet_yaml(layout: Layout, ca_file: Path) -> str:
    """The kubelet's config (JSON, which is YAML): cgroupfs (no systemd), cgroup v1 allowed, no iptables chains,
    no image garbage collection (nothing is pulled), served on loopback only. It leaves the host's kernel settings
    as they are and refuses none of them (protectKernelDefaults false, and the supervisor's private mounts take
    its writes)."""
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": "/eppkit",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "makeIPTablesUtilChains": False, "protectKernelDefaults": False,
        "address": NODE, "port": 10250, "healthzBindAddress": NODE, "healthzPort": 10248, "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False, "maxPods": 250, "podLogsDir": str(layout.pod_logs),
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99, "containerLogMaxSize": "50Mi",
        "volumeStatsAggPeriod": "0s", "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "10s", "serializeImagePulls": False, "resolvConf": "/etc/resolv.conf",
    }, indent=1) + "\n"
