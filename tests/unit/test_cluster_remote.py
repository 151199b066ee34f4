"""A cluster of your own by kubeconfig (eppkit/cluster/remote.py, apipod.py, portforward.py): what a Pod reached
through the API server alone is given, read whole, and the errors a user meets before anything starts."""

import base64
import json
import ssl

import pytest
import yaml

from eppkit.cli import main
from eppkit.cluster import apipod, handle, remote
from eppkit.cluster.apipod import ApiSite
from eppkit.cluster.pod import ManagedPod
from eppkit.cluster.portforward import ApiAccess
from eppkit.runtimes.kubernetes import _listener_ports


def test_files_come_from_a_configmap_at_their_own_paths_and_folders_are_the_pods_own(tmp_path):
    config, work = tmp_path / "envoy.yaml", tmp_path / "run"
    config.write_text("static_resources: {}\n")
    work.mkdir()
    files = apipod.pod_files("envoy", "ns", {str(config): "ro", str(work): "rw"}, {"a": "b"})
    [config_map] = files.config_maps
    assert config_map.metadata.name == "envoy-files" and config_map.metadata.labels == {"a": "b"}
    [(key, data)] = config_map.binaryData.items()
    assert base64.b64decode(data) == config.read_bytes()
    by_path = {m.mountPath: m for m in files.mounts}
    assert by_path[str(config)].subPath == key and by_path[str(config)].readOnly
    folder = next(v for v in files.volumes if v.name == by_path[str(work)].name)
    assert folder.emptyDir is not None and by_path[str(work)].subPath is None
    assert files.assemble is None


def test_a_file_too_large_for_one_configmap_goes_in_parts_put_together_before_the_pod_starts(tmp_path):
    module = tmp_path / "module.so"
    module.write_bytes(bytes(range(256)) * (3 * apipod.PART // 256 + 1))  # four parts
    files = apipod.pod_files("envoy", "ns", {str(module): "ro"}, {})
    parts = [base64.b64decode(cm.binaryData["part"]) for cm in files.config_maps]
    assert len(parts) == 4 and all(len(p) <= apipod.PART for p in parts) and b"".join(parts) == module.read_bytes()
    assert all(len(json.dumps(cm.binaryData)) < apipod.CONFIGMAP_LIMIT * 4 / 3 + 1024 for cm in files.config_maps)
    command, helper_mounts = files.assemble
    assert command[:2] == ["sh", "-c"] and command[2].startswith("cat /eppkit-parts/0/0/part /eppkit-parts/0/1/part")
    whole = next(m for m in files.mounts if m.mountPath == str(module))
    assert whole.subPath == "file" and any(m.name == whole.name for m in helper_mounts)


def test_files_over_what_the_kit_gives_a_pod_are_refused_naming_them(tmp_path, monkeypatch):
    monkeypatch.setattr(apipod, "FILES_LIMIT", 1024)
    module = tmp_path / "module.so"
    module.write_bytes(b"\0" * 1025)
    with pytest.raises(apipod.ApiPodError, match=r"over the 0 MiB the kit gives a Pod.*module\.so"):
        apipod.pod_files("envoy", "ns", {str(module): "ro"}, {})


def test_a_pod_reached_by_its_api_server_alone_is_pulled_placed_on_its_node_and_never_reads_a_host_path(tmp_path):
    made = ManagedPod("vllm-0", "eppkit/services:x", ["python", "-m", "eppkit.services.vllm"], tmp_path / "log",
                      namespace="ns", site=ApiSite(None, "worker-1")).with_mount(tmp_path)
    made.pod_name = "vllm-0"
    spec = made.manifest().spec
    container = spec.containers[0]
    assert container.imagePullPolicy == "IfNotPresent" and spec.nodeName == "worker-1" and spec.hostNetwork
    assert not [v for v in spec.volumes or [] if v.hostPath is not None]
    assert spec.securityContext is None  # this host's uid means nothing on another machine
    with pytest.raises(NotImplementedError, match="container runtime"):
        made.pause()


def test_envoys_forwarded_ports_are_its_listeners_not_the_clusters_it_dials(tmp_path):
    config = tmp_path / "envoy.yaml"
    config.write_text(yaml.safe_dump({"static_resources": {
        "listeners": [{"address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}}}],
        "clusters": [{"load_assignment": {"endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
            "socket_address": {"address": "127.0.0.1", "port_value": 9000}}}}]}]}}]}}))
    assert _listener_ports(config) == [10000]


def _kubeconfig(tmp_path, user: dict, cluster: dict | None = None):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443/", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


def test_port_forwarding_authenticates_as_the_kubeconfig_says_and_refuses_an_exec_plugin(tmp_path):
    access = ApiAccess.from_kubeconfig(_kubeconfig(tmp_path, {"token": "t0k"}))
    assert access.server == "https://10.0.0.1:6443" and access.headers == {"Authorization": "Bearer t0k"}
    assert access.ssl_context.verify_mode == ssl.CERT_NONE
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws", "args": ["eks"]}}
    with pytest.raises(ValueError, match="exec or auth-provider plugin"):
        ApiAccess.from_kubeconfig(_kubeconfig(tmp_path, plugin))


def test_a_kubeconfig_that_is_not_there_or_without_the_kubernetes_runtime_is_a_usage_error(tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.delenv(handle.KUBECONFIG_ENV, raising=False)
    with pytest.raises(SystemExit):
        main(["run", "--runtime", "kubernetes", "--kubeconfig", str(tmp_path / "none")])
    assert "no such file" in capsys.readouterr().err
    given = _kubeconfig(tmp_path, {"token": "t"})
    with pytest.raises(SystemExit):
        main(["run", "--runtime", "local", "--kubeconfig", str(given)])
    assert "add --runtime kubernetes" in capsys.readouterr().err


def test_the_pods_run_the_kits_images_from_the_registry_named_else_as_loaded(tmp_path):
    given = _kubeconfig(tmp_path, {"token": "t"})
    assert remote.OwnCluster(given).image("eppkit/envoy:1.40.0-abc") == "eppkit/envoy:1.40.0-abc"
    pulling = remote.OwnCluster(given, "registry.example:5000/")
    assert pulling.image("eppkit/envoy:1.40.0-abc") == "registry.example:5000/eppkit/envoy:1.40.0-abc"
    assert pulling.image("registry.example/my-epp:1", kits=False) == "registry.example/my-epp:1"  # yours, as named


def test_a_live_folder_is_one_configmap_mounted_whole_and_refresh_gives_it_the_folders_files_then_touches_the_pod(
        tmp_path):
    from lightkube.resources.core_v1 import ConfigMap, Pod

    eds = tmp_path / "eds"
    eds.mkdir()
    (eds / "picked.json").write_text('{"v": 1}')
    (eds / ".picked.json.partial").write_text("half written")
    files = apipod.pod_files("envoy", "ns", {str(eds): apipod.LIVE}, {})
    [config_map] = files.config_maps
    assert files.live == {str(eds): config_map.metadata.name} and set(config_map.binaryData) == {"picked.json"}
    [mount] = files.mounts
    assert mount.mountPath == str(eds) and mount.subPath is None  # whole: its kubelet swaps the files in place
    assert next(v for v in files.volumes if v.name == mount.name).configMap.name == config_map.metadata.name

    calls = []

    class Client:  # what refresh asks of the API server, in order
        def get(self, kind, name, namespace):
            return ConfigMap(binaryData={"picked.json": "", "gone.json": ""})

        def patch(self, kind, name, body, namespace, patch_type):
            calls.append((kind, name, body))

    (eds / "picked.json").write_text('{"v": 2}')
    apipod.refresh(Client(), "envoy", "ns", config_map.metadata.name, eds)
    (cm_kind, _, cm_body), (pod_kind, pod_name, pod_body) = calls
    assert cm_kind is ConfigMap and cm_body["binaryData"]["gone.json"] is None
    assert base64.b64decode(cm_body["binaryData"]["picked.json"]) == b'{"v": 2}'
    assert pod_kind is Pod and pod_name == "envoy" and apipod.REFRESHED in pod_body["metadata"]["annotations"]


def test_pool_pods_on_a_cluster_of_your_own_are_placed_by_its_network_and_told_their_ip_by_the_kubelet(tmp_path):
    pods = remote.LEARNED_PODS
    assert pods.address(0) == pods.address(7) == remote.POD_IP
    assert pods.check("10.244.1.7") == "10.244.1.7" and pods.check(remote.POD_IP) == remote.POD_IP
    with pytest.raises(ValueError):
        pods.check("not-an-address")
    made = ManagedPod("vllm-0", "eppkit/services:x", ["python", "-m", "eppkit.services.vllm", "--host", remote.POD_IP],
                      tmp_path / "log", namespace="ns", site=ApiSite(None, "n")).on_pod_network(
        None, ready_path="/health", port=8000)
    made.pod_name = "vllm-0"
    spec = made.manifest().spec
    container = spec.containers[0]
    assert not spec.hostNetwork and [g.conditionType for g in spec.readinessGates] == ["eppkit.io/ready"]
    pod_ip = next(e for e in container.env if e.name == "POD_IP")
    assert pod_ip.valueFrom.fieldRef.fieldPath == "status.podIP" and container.readinessProbe.httpGet.port == 8000


def test_the_pools_home_on_a_cluster_of_your_own_is_its_api_server_and_a_kubeconfig_in_the_testbeds_namespace(
        tmp_path):
    source = tmp_path / "kubeconfig"
    source.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "mine",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.5:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "mine", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "keep"}}]}))
    plane = remote.OwnPlane.from_file(str(source))
    assert plane.server == "https://10.0.0.5:6443"
    written = yaml.safe_load(plane.write_kubeconfig(tmp_path / "bed.kubeconfig", "bed-ns").read_text())
    contexts = {c["name"]: c["context"] for c in written["contexts"]}
    assert contexts["mine"]["namespace"] == "bed-ns" and contexts["other"]["namespace"] == "keep"
    assert (tmp_path / "bed.kubeconfig").stat().st_mode & 0o077 == 0  # it holds the user's credentials


def test_a_service_given_the_kubeconfig_of_a_cluster_of_your_own_gets_one_of_its_own_identity_instead(tmp_path):
    from eppkit.cluster import ClusterError
    from eppkit.cluster.pod import CLUSTER_DNS_SERVER, SERVICE_ACCOUNT_DIR
    from eppkit.modes.external_epp import IMAGE_RBAC
    from eppkit.plan import ServiceSpec
    from eppkit.runtimes.kubernetes import KubernetesLauncher

    source = tmp_path / "mine"
    source.write_text(yaml.safe_dump({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.5:6443"}}],
        "users": [{"name": "u", "user": {"token": "the-users-secret"}}]}))
    own = remote.OwnCluster(source)
    written = str(own.plane.write_kubeconfig(tmp_path / "kubeconfig", "bed"))
    own.api_server_for_pods = lambda: None  # its node is another machine (no cluster asked)
    launcher = object.__new__(KubernetesLauncher)  # no cluster asked: what a Pod would be given
    launcher.cluster = own
    launcher._namespace = lambda run_dir: "bed"
    spec = ServiceSpec("epp", "", 9000, argv=["--kubeconfig", written], image="registry.example/my-epp:1",
                       env={"KUBECONFIG": written}, kube_rbac=IMAGE_RBAC)
    given, env, by_name = launcher._no_user_credentials(spec, {"OTHER": "x"}, tmp_path)
    own = given.argv[1]
    assert own != written and given.env["KUBECONFIG"] == own and env == {"OTHER": "x"} and by_name
    text = (tmp_path / "epp.in-cluster.kubeconfig").read_text()
    assert "the-users-secret" not in text
    config = yaml.safe_load(text)
    assert config["users"][0]["user"] == {"tokenFile": f"{SERVICE_ACCOUNT_DIR}/token"}
    assert config["clusters"][0]["cluster"]["server"] == CLUSTER_DNS_SERVER
    with pytest.raises(ClusterError, match="holds your user's credentials: the kit puts them in no ConfigMap"):
        launcher._no_user_credentials(ServiceSpec("epp", "", 9000, argv=["--kubeconfig", written], image="x"), {},
                                      tmp_path)
