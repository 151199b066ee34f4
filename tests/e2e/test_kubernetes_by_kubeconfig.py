"""The kubernetes runtime on a cluster of your own (``--kubeconfig``, docs/kubernetes.md), proven on the kit's own
one-node cluster used as if it were another: its admin kubeconfig given, so the kit reaches it through its API
server alone (no ``ctr``, no kubelet log files, no host paths, no image imports).

| what | expected |
|---|---|
| a Pod reached by its API server alone, on the pod network, its port forwarded from this host through the API server | the mock answers a chat completion at this host's 127.0.0.1 on the same port number; its output (a file it was given from a ConfigMap, its listening line) read through ``pods/log``; no hostPath; stopped by its kubelet's SIGTERM with exit code 0; its ConfigMap, Pod and forward gone |
| a forward to a port nothing listens on | the connection closes; the kubelet's words kept ("connection refused") |
| a testbed by kubeconfig (ext_proc; dynmod-callout) | serves with a complete trace; each of its Pods pulled (``IfNotPresent``), none reading a host path, Envoy's config from a ConfigMap; the dynamic module's .so (4 MiB) in parts, put together by a helper container |
| a pool by kubeconfig (GAIE's EPP) | its Pods on the cluster's pod network at the addresses its network chose (`$(POD_IP)` expanded by the kubelet), GAIE's EPP in an image of its own, Envoy's endpoints a live ConfigMap: a pod added reaches Envoy through it; an address asked for is refused in words |
| an EPP image of yours told `--kubeconfig {kubeconfig}` | serves, as its own ServiceAccount: given a kubeconfig of that identity (token and CA by their files), none of the kubeconfig user's credentials in any ConfigMap |
| a program of this host when the node is another machine | refused before it starts, in words (where the node is this machine it runs: the contract's external EPP) |
| a user without the rights the kit needs (a ServiceAccount bound to nothing) | told which, in the API server's own answer (SelfSubjectAccessReview), before anything starts; ``eppkit run`` fails with it, no traceback |

The rest of the runtime contract runs on such a cluster too (.ci/run: the mode × flow test with
``--eppkit-kubeconfig``).
"""

import base64
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eppkit import TraceCheck, cluster
from eppkit.cluster import handle, namespaces, podnet
from eppkit.cluster.apipod import ApiSite
from eppkit.cluster.pod import ManagedPod
from eppkit.cluster.portforward import PortForward
from eppkit.components.ports import PortAllocator
from eppkit.pytest_plugin.state import CLUSTER
from eppkit.runtimes import images
from eppkit.topology import Topology, VllmSpec

pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_runtimes("kubernetes")]

CHAT = {"model": "mock-llm", "max_tokens": 4, "messages": [{"role": "user", "content": "through the API server"}]}


@pytest.fixture
def own_cluster_as_another(eppkit_runtime, request):
    """The kit's one-node cluster, given by its kubeconfig (a handle, the session's for the test, as
    ``--eppkit-kubeconfig`` makes it, passed down to the test's testbeds): the kubernetes runtime reaches it as any
    other. The images its Pods pull are
    loaded into its node first, as `kind load docker-image $(eppkit cluster images)` does."""
    from eppkit.cluster import images as node_images
    from eppkit.runtimes.kubernetes import pod_images

    path = cluster.running()["kubeconfig"]
    for tag in pod_images():
        node_images.ensure_from_docker(cluster.layout().containerd_socket, tag, cluster.layout().home / "images.lock")
    own = handle.named(path)
    before = request.config.stash.get(CLUSTER, None)
    request.config.stash[CLUSTER] = own
    yield own
    if before is None:
        del request.config.stash[CLUSTER]
    else:
        request.config.stash[CLUSTER] = before


def _post(port: int, body: dict) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def test_a_pod_reached_by_its_api_server_alone_serves_through_a_forward_logs_and_stops_clean(own_cluster_as_another,
                                                                                            tmp_path):
    from lightkube.resources.core_v1 import ConfigMap, Pod

    own = own_cluster_as_another
    namespace = namespaces.ensure_namespace(f"{tmp_path.name}-api-only", own.client())
    blocks = podnet.Blocks(cluster.layout().blocks)
    block = blocks.reserve(namespace)
    ports = PortAllocator()
    port = ports.port()
    given = tmp_path / "given.txt"
    given.write_text("a file given from a ConfigMap\n")
    forwarded = ApiSite(own, own.node_name(), forward=(own.access(), (port,)))  # even on this machine
    mock = ManagedPod("vllm-api", images.ensure().services,
                      ["sh", "-c", f"cat {given} && exec python -m eppkit.services.vllm --host 0.0.0.0 --port {port} "
                       "--instance vllm-api --served-model-name mock-llm"],
                      tmp_path / "vllm-api.log", namespace=namespace, site=forwarded).with_mount(given)
    mock.on_pod_network(podnet.BlockPods(block).address(0), ready_path="/health", port=port)
    try:
        mock.start()
        deadline, status = time.monotonic() + 60, None
        while status != 200 and time.monotonic() < deadline:
            try:
                status, headers, answer = _post(port, CHAT)
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)
        assert status == 200 and headers.get("x-inference-pod") == "vllm-api", (status, mock.log_tail(20))
        assert answer["choices"][0]["message"]["content"]
        spec = own.client().get(Pod, mock.pod_name, namespace=namespace).spec
        assert not [v for v in spec.volumes if v.hostPath is not None], spec.volumes
        assert spec.containers[0].imagePullPolicy == "IfNotPresent"
        name = mock.pod_name
        assert own.client().get(ConfigMap, f"{name}-files", namespace=namespace).binaryData
        log = ""
        while "listening on" not in log and time.monotonic() < deadline:
            log = mock.read_log()
            time.sleep(0.1)
        assert log.startswith("a file given from a ConfigMap\n") and f"listening on http://0.0.0.0:{port}" in log, log
        assert mock.stop() == 0, mock.log_tail(20)  # its kubelet's SIGTERM: the mock flushes and exits 0
        assert [cm.metadata.name for cm in own.client().list(ConfigMap, namespace=namespace)
                if cm.metadata.name == f"{name}-files"] == []
        with pytest.raises(OSError):  # the forward is closed with the Pod
            _post(port, CHAT)
    finally:
        mock.stop()
        namespaces.delete_namespace(namespace, own.client(), wait_s=30)
        blocks.release(block)
        ports.release()


def test_a_forward_to_a_port_nothing_listens_on_closes_the_connection_in_the_kubelets_words(own_cluster_as_another,
                                                                                          tmp_path):
    from lightkube.resources.core_v1 import Pod

    own = own_cluster_as_another
    namespace = namespaces.ensure_namespace(f"{tmp_path.name}-nothing", own.client())
    idle = ManagedPod("idle", images.ensure().services, ["sleep", "60"], tmp_path / "idle.log", namespace=namespace,
                      site=own.site((), lambda: ""))
    try:
        idle.start()
        deadline = time.monotonic() + 30
        while not idle.read_log() and idle.returncode() is None and time.monotonic() < deadline:
            if own.client().get(Pod, idle.pod_name, namespace=namespace).status.phase == "Running":
                break
            time.sleep(0.1)
        forward = PortForward(own.access(), namespace, idle.pod_name, 1).start()
        try:
            with pytest.raises((OSError, http.client.HTTPException)):
                _post(forward.local_port, CHAT)
            deadline = time.monotonic() + 5
            while not forward.errors and time.monotonic() < deadline:
                time.sleep(0.05)
            assert forward.errors and "connection refused" in forward.errors[0], forward.errors
        finally:
            forward.close()
    finally:
        idle.stop(grace_s=1.0)
        namespaces.delete_namespace(namespace, own.client(), wait_s=30)


@pytest.mark.parametrize("mode", ["ext_proc", "dynmod-callout"])
def test_a_testbed_by_kubeconfig_serves_with_a_complete_trace_and_reads_no_host_path(own_cluster_as_another,
                                                                                    eppkit_testbed_factory, mode):
    from lightkube.resources.core_v1 import ConfigMap, Pod

    bed = eppkit_testbed_factory(Topology(mode=mode, vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")]))
    client = bed.client()
    result = client.chat(CHAT)
    assert result.status == 200, (result.status, result.body)
    TraceCheck(bed.wait_for_trace(result)).request_path(bed.mode)
    namespace = namespaces.dns_label(bed.run_dir.name)
    pods = list(own_cluster_as_another.client().list(Pod, namespace=namespace))
    picker = bed.mode.picker
    # (Jaeger is the session's)
    assert {p.metadata.labels["eppkit.component"] for p in pods} >= {"envoy", picker, "vllm-0", "vllm-1"}
    for pod in pods:
        assert not [v for v in pod.spec.volumes or [] if v.hostPath is not None], (pod.metadata.name, pod.spec.volumes)
        assert pod.spec.containers[0].imagePullPolicy == "IfNotPresent"
    files = {cm.metadata.name for cm in own_cluster_as_another.client().list(ConfigMap, namespace=namespace)}
    assert any(name.startswith("envoy") for name in files), files
    envoy = next(p for p in pods if p.metadata.labels["eppkit.component"] == "envoy")
    if mode == "dynmod-callout":  # its .so in parts, put together by the helper before Envoy started
        assert [c.name for c in envoy.spec.initContainers] == ["files"]
        assert len([name for name in files if "-big" in name]) >= 4, files


@pytest.mark.eppkit_prepare("gaie-epp")
def test_a_pool_by_kubeconfig_is_real_pods_where_its_network_puts_them_and_envoy_follows_its_changes(
        own_cluster_as_another, eppkit_testbed_factory):
    """GAIE's EPP in-cluster (its own image: no ConfigMap holds 84 MB), watching pool Pods whose addresses the
    cluster's network chose (the kit's bridge gives an unpinned Pod one of host-local's), Envoy's endpoints a live
    ConfigMap: a pod added is served, and its address is what the kubelet reported."""
    from lightkube.resources.core_v1 import ConfigMap, Pod

    bed = eppkit_testbed_factory(Topology(mode="gaie-epp", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")]))
    namespace = bed.pool.target.namespace
    client = own_cluster_as_another.client()
    pods = {p.metadata.name: p for p in client.list(Pod, namespace=namespace)}
    first, last = (int(a.rsplit(".", 1)[1]) for a in podnet.FREE_RANGE)
    for name in ("vllm-0", "vllm-1"):
        pod, endpoint = pods[name], next(ep for ep in bed.backends if ep.name == name)
        assert pod.spec.hostNetwork is not True and endpoint.host == pod.status.podIP, (pod.status, endpoint)
        assert pod.status.podIP.startswith("10.233.255.") and first <= int(pod.status.podIP.rsplit(".", 1)[1]) <= last
        assert "$(POD_IP)" in pod.spec.containers[0].args  # the kubelet put the Pod's IP there
    epp = pods[bed.mode.picker]
    assert epp.spec.containers[0].image.startswith("eppkit/program-epp:") and epp.spec.serviceAccountName
    assert not [v for v in epp.spec.volumes or [] if v.hostPath is not None]
    envoy = pods["envoy"]
    live = [v.configMap.name for v in envoy.spec.volumes if v.configMap is not None and "-live" in v.configMap.name]
    assert len(live) == 1, envoy.spec.volumes
    chat = bed.client()
    assert chat.chat(CHAT).status == 200
    added = bed.pool.add_pod()  # returns once Envoy's picked cluster holds it: through the live ConfigMap
    assert added.ready and added.ip not in {ep.host for ep in bed.backends if ep.name != added.name}
    written = client.get(ConfigMap, live[0], namespace=namespace).binaryData
    assert any(added.ip.encode() in base64.b64decode(v) for v in written.values()), written
    assert chat.chat(CHAT).status == 200
    with pytest.raises(ValueError, match="leave ip out"):
        bed.pool.add_pod(ip="10.233.255.99")


@pytest.mark.eppkit_prepare("control-plane")
def test_an_epp_image_that_watches_its_pool_runs_as_its_own_serviceaccount_and_no_configmap_holds_your_credentials(
        own_cluster_as_another, eppkit_testbed_factory):
    """The kit's EPP from the services image, as an EPP of yours would be: told ``--kubeconfig {kubeconfig}``, it is
    given a kubeconfig of its own ServiceAccount (its token and the CA by their files) in place of the testbed's,
    which holds the kubeconfig user's credentials; its Role reads its Pods and the InferencePool."""
    from lightkube.resources.core_v1 import ConfigMap, Pod

    command = ("python -m eppkit.services.epp --host 127.0.0.1 --port {grpc_port} --kubeconfig {kubeconfig} "
               "--pool-namespace {pool_namespace} --pool-name {pool_name} --metrics-interval 0.2")
    bed = eppkit_testbed_factory(Topology(mode="external-epp", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")],
                                          options={"epp_image": images.ensure().services, "epp_command": command}))
    served = {bed.served_pod(r.headers) for r in (bed.client().chat(CHAT) for _ in range(8)) if r.status == 200}
    assert served <= {"vllm-0", "vllm-1"} and served, served
    namespace = bed.pool.target.namespace
    epp = own_cluster_as_another.client().get(Pod, "epp", namespace=namespace)
    assert epp.spec.serviceAccountName == "epp"
    secret = json.loads(Path(own_cluster_as_another.kubeconfig).read_text())["users"][0]["user"]
    secrets = [v for v in secret.values() if isinstance(v, str) and len(v) > 16]
    held = {cm.metadata.name: base64.b64decode(v).decode(errors="replace") for cm in
            own_cluster_as_another.client().list(ConfigMap, namespace=namespace) for v in (cm.binaryData or {}).values()}
    assert secrets and not [name for name, text in held.items() for s in secrets if s in text], "credentials held"
    args = epp.spec.containers[0].args
    assert args[args.index("--kubeconfig") + 1].endswith("epp.in-cluster.kubeconfig")


def test_a_program_of_this_host_is_refused_in_words_when_the_node_is_another_machine(own_cluster_as_another,
                                                                                     monkeypatch, tmp_path):
    """Where the node is this machine a program of this host runs beside its Pods (the contract's external EPP
    does); a node that is another machine is told by its addresses (here: made to look so)."""
    from eppkit import runtimes
    from eppkit.plan import ServiceSpec

    launcher = runtimes.launcher("kubernetes", own_cluster_as_another)  # the handle made for the test, passed down
    assert launcher.cluster is own_cluster_as_another
    monkeypatch.setattr(own_cluster_as_another, "_node", own_cluster_as_another.node()._replace(mine=False))
    spec = ServiceSpec("epp", "", 9000, argv=[sys.executable, "-m", "eppkit.services.epp"], on_host=True)
    with pytest.raises(cluster.ClusterError, match=r"runs on this host .* \(their node is another machine\)"):
        launcher.service(spec, {}, tmp_path, [])


def test_a_user_without_the_rights_the_kit_needs_is_told_which_before_anything_starts(own_cluster_as_another,
                                                                                     tmp_path):
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ServiceAccount, ServiceAccountToken

    admin = own_cluster_as_another.client()
    namespace = namespaces.ensure_namespace(f"nobody-{time.time_ns()}", admin)
    try:
        admin.create(ServiceAccount(metadata=ObjectMeta(name="nobody", namespace=namespace)))
        request = ServiceAccountToken(metadata=ObjectMeta(name="nobody", namespace=namespace),
                                      spec=TokenRequestSpec(audiences=[], expirationSeconds=600))
        token = admin.create(request, "nobody", namespace=namespace).status.token
        config = json.loads(Path(own_cluster_as_another.kubeconfig).read_text())
        config["users"][0]["user"] = {"token": token}  # the same cluster, as a ServiceAccount bound to nothing
        nobody = tmp_path / "nobody.kubeconfig"
        nobody.write_text(json.dumps(config))
        ok, why = handle.named(nobody).available()
        assert not ok and f"the user of {nobody} may not list nodes, create namespaces" in why, why
        assert "create pods" in why and "ClusterRole" in why
        run = subprocess.run([sys.executable, "-m", "eppkit", "run", "--runtime", "kubernetes", "--kubeconfig",
                              str(nobody), "--mode", "direct"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, handle.KUBECONFIG_ENV: ""})
        assert run.returncode != 0 and "may not list nodes" in run.stderr, run.stderr[-2000:]
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
    finally:
        namespaces.delete_namespace(namespace, admin, wait_s=30)
