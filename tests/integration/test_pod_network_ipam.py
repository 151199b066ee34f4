"""The kit's CNI IPAM plugin (eppkit/cluster/podnet.py), run as containerd's CNI bridge plugin runs it: a Pod gets
the address the kit pinned for it, and a Pod nobody pinned gets a CNI error saying so."""

import json
import subprocess

import pytest
from eppkit.cluster import configs, podnet


def _ipam(bin_dir, command, pod="pool-ns_vllm-0"):
    namespace, name = pod.split("_")
    env = {"CNI_COMMAND": command, "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
           "K8S_POD_INFRA_CONTAINER_ID=abc", "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(bin_dir / podnet.IPAM)], env=env, input="{}", capture_output=True, text=True)


def test_a_pod_gets_the_address_the_kit_pinned_for_it_and_an_unpinned_one_a_cni_error(tmp_path):
    bin_dir, pins = tmp_path / "bin", tmp_path / "pins"
    podnet.install_plugins(bin_dir, pins, configs.CNI_BIN)
    assert (bin_dir / "bridge").resolve() == configs.CNI_BIN / "bridge"
    podnet.pin(pins, "pool-ns", "vllm-0", podnet.address(3, 0))
    added = _ipam(bin_dir, "ADD")
    assert added.returncode == 0, added
    assert json.loads(added.stdout)["ips"] == [{"address": "10.233.3.2/16"}]
    assert _ipam(bin_dir, "DEL").returncode == 0
    podnet.unpin(pins, "pool-ns", "vllm-0")
    refused = _ipam(bin_dir, "ADD")
    assert refused.returncode == 1 and "no address pinned for pod pool-ns/vllm-0" in json.loads(refused.stdout)["msg"]
    with pytest.raises(ValueError, match="outside the pod network"):
        podnet.pin(pins, "pool-ns", "vllm-1", "127.0.0.2")
