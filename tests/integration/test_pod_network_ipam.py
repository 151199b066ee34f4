"""The kit's CNI IPAM plugin (eppkit/cluster/podnet.py), run as containerd's CNI bridge plugin runs it: a Pod gets
the address the kit pinned for it, and a Pod nobody pinned the next free one of host-local's range (block 255), given
back at its DEL."""

import json
import subprocess

import pytest
from eppkit.cluster import configs, podnet
from eppkit.pytest_plugin.state import require


def _ipam(bin_dir, command, pod="pool-ns_vllm-0", container="abc"):
    namespace, name = pod.split("_")
    env = {"CNI_COMMAND": command, "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
           f"K8S_POD_INFRA_CONTAINER_ID={container}", "CNI_CONTAINERID": container, "CNI_IFNAME": "eth0",
           "CNI_NETNS": "/proc/self/ns/net", "CNI_PATH": str(bin_dir), "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(bin_dir / podnet.IPAM)], env=env, input="{}", capture_output=True, text=True)


def test_a_pod_gets_the_address_the_kit_pinned_for_it_and_an_unpinned_one_a_free_one(tmp_path):
    missing = podnet.plugins_missing(configs.CNI_BIN)
    require(missing is None, missing or "")
    bin_dir, pins = tmp_path / "bin", tmp_path / "pins"
    podnet.install_plugins(bin_dir, pins, configs.CNI_BIN)
    assert (bin_dir / "bridge").resolve() == configs.CNI_BIN / "bridge"
    podnet.pin(pins, "pool-ns", "vllm-0", podnet.address(3, 0))
    added = _ipam(bin_dir, "ADD")
    assert added.returncode == 0, added
    assert json.loads(added.stdout)["ips"] == [{"address": "10.233.3.2/16"}]
    assert _ipam(bin_dir, "DEL").returncode == 0
    podnet.unpin(pins, "pool-ns", "vllm-0")
    first, second = _ipam(bin_dir, "ADD", container="c1"), _ipam(bin_dir, "ADD", "other_pod", container="c2")
    assert first.returncode == 0 and second.returncode == 0, (first, second)
    leased = [json.loads(r.stdout)["ips"][0]["address"] for r in (first, second)]
    assert leased == ["10.233.255.1/16", "10.233.255.2/16"]  # the whole pod network's prefix: the host is on-link
    assert _ipam(bin_dir, "DEL", container="c1").returncode == 0
    assert json.loads(_ipam(bin_dir, "ADD", "third_pod", container="c3").stdout)["ips"][0]["address"] != leased[1]
    podnet.clear(pins, tmp_path / "blocks")
    assert not podnet.leased(pins).exists()
    with pytest.raises(ValueError, match="outside the pod network"):
        podnet.pin(pins, "pool-ns", "vllm-1", "127.0.0.2")
