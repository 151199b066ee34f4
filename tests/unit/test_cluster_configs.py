"""The one-node cluster's configs, pause image and preflight error, read whole: what each daemon is told keeps the
host's network and kernel as they are."""

import io
import json
import tarfile
import tomllib

import pytest
import yaml
from eppkit.cluster import configs, images, missing_error, podnet
from eppkit.cluster.configs import Layout


@pytest.fixture
def layout(tmp_path):
    return Layout(tmp_path / "k8s", run=tmp_path / "run")


def test_containerd_keeps_to_its_own_folders_and_socket_and_leaves_oom_scores_alone(layout):
    config = tomllib.loads(configs.containerd_toml(layout, "localhost/eppkit-pause:abc"))
    assert config["root"] == str(layout.containerd_root) and config["state"] == str(layout.containerd_state)
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "localhost/eppkit-pause:abc"
    assert cri["restrict_oom_score_adj"] is True and cri["disable_apparmor"] is True
    assert cri["cni"]["conf_dir"] == str(layout.cni_conf)
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False


def test_the_network_turns_on_no_forwarding_and_writes_no_iptables_rule(layout):
    plugin = json.loads(configs.cni_conflist(layout))["plugins"][0]
    assert plugin["type"] == "bridge"
    assert plugin["isGateway"] is False and plugin["ipMasq"] is False  # else: ip_forward on, a MASQUERADE rule
    assert plugin["ipam"] == {"type": podnet.IPAM}


def test_each_testbed_reserves_its_own_block_of_pod_addresses(tmp_path):
    blocks = podnet.Blocks(tmp_path / "blocks")
    first, second = blocks.reserve("a"), blocks.reserve("b")
    assert first != second and podnet.address(first, 0) != podnet.address(second, 0)
    blocks.release(first)
    assert blocks.reserve("c") == first
    assert podnet.address(1, 252) == "10.233.1.254"
    with pytest.raises(ValueError):
        podnet.address(1, 253)


def test_the_kubelet_listens_on_loopback_writes_no_iptables_chain_and_collects_no_image(layout, tmp_path):
    kubelet = yaml.safe_load(configs.kubelet_yaml(layout, tmp_path / "ca.crt"))
    assert kubelet["address"] == kubelet["healthzBindAddress"] == configs.NODE == "127.0.0.1"
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["makeIPTablesUtilChains"] is False
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["imageGCHighThresholdPercent"] == 100  # nothing is pulled: nothing may be collected
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"


def test_the_pause_image_is_a_docker_archive_of_one_layer_with_its_binary(tmp_path):
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF pause")
    tag = images.pause_tag(binary)
    assert tag.startswith("localhost/eppkit-pause:")
    with tarfile.open(fileobj=io.BytesIO(images.docker_archive(binary, tag))) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        assert manifest[0]["RepoTags"] == [tag]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())
        assert config["config"]["Entrypoint"] == ["/pause"]
        with tarfile.open(fileobj=tar.extractfile(manifest[0]["Layers"][0])) as layer:
            member = layer.getmember("pause")
            assert member.mode == 0o755 and layer.extractfile(member).read() == b"\x7fELF pause"
    binary.write_bytes(b"\x7fELF pause, rebuilt")
    assert images.pause_tag(binary) != tag


def test_a_machine_without_what_the_cluster_needs_gets_three_lines_naming_it_and_another_way():
    message = str(missing_error(["containerd", "root"]))
    lines = message.splitlines()
    assert len(lines) == 3
    assert "containerd, root missing" in lines[0]
    assert "apt-get install containerd runc containernetworking-plugins" in lines[1]
    assert "--runtime docker or local" in lines[2] and "docs/kubernetes.md" in lines[2]


def test_a_component_is_a_host_network_pod_that_is_never_pulled_and_mounts_what_it_reads_at_the_same_path(tmp_path):
    from eppkit.cluster.namespaces import label_value
    from eppkit.cluster.pod import ManagedPod

    config = tmp_path / "envoy.yaml"
    config.write_text("{}")
    made = (ManagedPod("envoy", "eppkit/envoy:1.40.0-x", ["-c", str(config)], tmp_path / "envoy.log",
                       namespace="ns", entrypoint=["/usr/local/bin/envoy"], extra_labels={"eppkit.testbed": "a/b"})
            .with_env(A="1").with_mount(tmp_path, "rw").with_mount(config, "ro").with_cwd(tmp_path))
    made.pod_name = "envoy"
    pod = made.manifest()
    spec, container = pod.spec, pod.spec.containers[0]
    assert spec.hostNetwork and spec.nodeName == configs.NODE and spec.restartPolicy == "Never"
    assert spec.automountServiceAccountToken is False and spec.enableServiceLinks is False
    assert container.imagePullPolicy == "Never"
    assert container.command == ["/usr/local/bin/envoy"] and container.args == ["-c", str(config)]
    assert {(m.mountPath, m.readOnly) for m in container.volumeMounts} == {(str(tmp_path), False), (str(config), True)}
    assert {v.hostPath.path: v.hostPath.type for v in spec.volumes} == {str(tmp_path): "Directory",
                                                                          str(config): "File"}
    assert container.workingDir == str(tmp_path)
    assert all(len(v) <= 63 for v in pod.metadata.labels.values())
    assert pod.metadata.labels["eppkit.testbed"] == label_value("a/b") == "a.b"
    assert "/" in pod.metadata.annotations["eppkit.io/owner"]  # the owner: host/boot/pidns/pid/start, no label


def test_a_cri_log_line_is_given_back_as_the_program_wrote_it():
    from eppkit.cluster.pod import cri_line

    assert cri_line(b"2026-11-27T13:05:44.658711106Z stderr F [info] starting main dispatch loop") == \
        b"[info] starting main dispatch loop\n"
    assert cri_line(b"2026-11-27T13:05:44.6Z stdout P a line cut ") + cri_line(b"2026-11-27T13:05:44.7Z stdout F in two") \
        == b"a line cut in two\n"
    assert cri_line(b"2026-11-27T13:05:44.6Z stdout F ") == b"\n"  # an empty line stays one
