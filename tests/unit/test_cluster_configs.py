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


def test_a_pool_pod_is_on_the_pod_network_ready_by_its_probe_and_the_gate_the_kit_writes(tmp_path):
    from eppkit.cluster.pod import ManagedPod
    from eppkit.components.inference_pool import READY_GATE

    made = ManagedPod("vllm-0", "eppkit/services:x", ["python", "-m", "services.vllm"], tmp_path / "vllm-0.log",
                      namespace="ns").on_pod_network("10.233.1.2", ready_path="/health", port=8000)
    made.pod_name = "vllm-0"
    spec = made.manifest().spec
    assert not spec.hostNetwork
    probe = spec.containers[0].readinessProbe
    assert (probe.httpGet.path, probe.httpGet.port, probe.periodSeconds) == ("/health", 8000, 1)
    assert [g.conditionType for g in spec.readinessGates] == [READY_GATE]
    grpc = ManagedPod("p", "i", [], tmp_path / "p.log", namespace="ns").on_pod_network("10.233.1.3", ready_path=None,
                                                                                      port=9000)
    grpc.pod_name = "p"
    assert grpc.manifest().spec.containers[0].readinessProbe.tcpSocket.port == 9000


def test_an_in_cluster_client_gets_its_service_account_token_and_the_api_server_but_no_kubeconfig(tmp_path):
    from eppkit.cluster.pod import SERVICE_ACCOUNT_DIR, ManagedPod

    made = (ManagedPod("epp", "eppkit/services:x", ["/cache/epp"], tmp_path / "epp.log", namespace="ns")
            .with_env(KUBECONFIG=str(tmp_path / "kubeconfig"), OTEL_SERVICE_NAME="gaie-epp")
            .in_cluster("epp", "https://127.0.0.1:6443"))
    made.pod_name = "epp"
    spec = made.manifest().spec
    env = {e.name: e.value for e in spec.containers[0].env}
    assert "KUBECONFIG" not in env and env["OTEL_SERVICE_NAME"] == "gaie-epp"
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    assert spec.serviceAccountName == "epp" and spec.hostNetwork
    mount = next(m for m in spec.containers[0].volumeMounts if m.mountPath == SERVICE_ACCOUNT_DIR)
    sources = next(v for v in spec.volumes if v.name == mount.name).projected.sources
    assert [s.serviceAccountToken.path for s in sources if s.serviceAccountToken] == ["token"]
    assert [s.configMap.name for s in sources if s.configMap] == ["kube-root-ca.crt"]


def test_on_the_pod_network_a_pod_reaches_the_host_at_its_bridge_address_and_serves_one_pod():
    from eppkit.plan import ServiceSpec
    from eppkit.runtimes.kubernetes import _pod_network_address, _to_host

    assert _to_host("http://127.0.0.1:4317", podnet.HOST) == f"http://{podnet.HOST}:4317"
    assert _pod_network_address(ServiceSpec("vllm-0", "services.vllm", 8000, host="10.233.4.2")) == "10.233.4.2"
    assert _pod_network_address(ServiceSpec("epp", "services.epp", 9000)) is None
    with pytest.raises(ValueError, match="pods_per_mock at 1"):
        _pod_network_address(ServiceSpec("vllm-0", "services.vllm", 8000, host="10.233.4.2,10.233.4.3"))


def test_a_testbeds_block_holds_its_pods_and_refuses_an_address_outside_it():
    pods = podnet.BlockPods(7)
    assert pods.address(0) == "10.233.7.2" and pods.check("10.233.7.200") == "10.233.7.200"
    for outside in ("10.233.8.2", "127.0.0.2", "pod"):
        with pytest.raises(ValueError, match="outside this testbed's block"):
            pods.check(outside)


def test_a_cri_log_line_is_given_back_as_the_program_wrote_it():
    from eppkit.cluster.nodepod import cri_line

    assert cri_line(b"2026-11-27T13:05:44.658711106Z stderr F [info] starting main dispatch loop") == \
        b"[info] starting main dispatch loop\n"
    assert cri_line(b"2026-11-27T13:05:44.6Z stdout P a line cut ") + cri_line(b"2026-11-27T13:05:44.7Z stdout F in two") \
        == b"a line cut in two\n"
    assert cri_line(b"2026-11-27T13:05:44.6Z stdout F ") == b"\n"  # an empty line stays one
