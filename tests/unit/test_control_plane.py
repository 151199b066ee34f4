"""The control plane's parts that run no process: its build recipe and errors, certificates and kubeconfig, the
pool's API objects as written, Envoy's EDS files, which modes watch a pool, and how a picker learns its pool
from the objects."""

import json

import pytest
import yaml
from cryptography import x509

from eppkit import modes
from eppkit.builds import controlplane as builds
from eppkit.components import controlplane, inference_pool
from eppkit.gateway import eds
from eppkit.modes import external_epp, gaie_epp
from eppkit.plan import Endpoint
from eppkit.services.picker.kube_pool import KubePool, endpoints_for
from eppkit.services.picker.saturation import KubeObjectives
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.settings import build as build_picker
from eppkit.topology import Topology
from eppkit.components.ports import PortAllocator
from tests.support import kit

pytestmark = pytest.mark.unit

KUBERNETES_GOMOD = """module k8s.io/kubernetes

go 1.25.0

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
)
"""


# -- the build -------------------------------------------------------------------------------------

def test_the_kube_apiserver_wrapper_pins_every_staging_module_to_its_published_version():
    gomod = builds.kube_wrapper_gomod(KUBERNETES_GOMOD)
    assert f"require k8s.io/kubernetes {builds.KUBE_VERSION}" in gomod
    assert "\tk8s.io/api => k8s.io/api v0.35.4\n" in gomod and "\tk8s.io/apiserver => k8s.io/apiserver v0.35.4\n" in gomod
    assert "./staging" not in gomod
    with pytest.raises(builds.ControlPlaneBuildError, match="no replace block"):
        builds.kube_wrapper_gomod("module k8s.io/kubernetes\n")


def test_assets_that_hold_no_binaries_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(builds.ASSETS_ENV, str(tmp_path / "empty"))
    assert builds.find() is None
    with pytest.raises(builds.ControlPlaneBuildError, match=r"holds no etcd and kube-apiserver.*\nHint: "):
        builds.build(lambda _: None)


def test_without_go_the_build_names_what_is_missing_and_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(builds.ASSETS_ENV, raising=False)
    monkeypatch.setattr(builds.shutil, "which", lambda name: None)
    with pytest.raises(builds.ControlPlaneBuildError) as failed:
        builds.build(lambda _: None)
    assert "eppkit bootstrap" in str(failed.value) and "`go` is not on PATH" in str(failed.value)
    assert builds.ASSETS_ENV in str(failed.value)


def test_a_go_older_than_etcd_needs_is_refused_with_the_versions(monkeypatch):
    monkeypatch.setattr(builds, "go_version", lambda go, env: "go1.25.6")
    with pytest.raises(builds.ControlPlaneBuildError, match=r"needs Go >= 1\.26; `go` is go1\.25\.6"):
        builds._check_go("go", {})
    monkeypatch.setattr(builds, "go_version", lambda go, env: "go1.26.8")
    builds._check_go("go", {})


def test_binaries_of_your_own_are_used_as_they_are(monkeypatch, tmp_path):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in (builds.ETCD, builds.KUBE_APISERVER):
        (assets / name).write_text("#!/bin/sh\n")
    monkeypatch.setenv(builds.ASSETS_ENV, str(assets))
    assert builds.find() is None  # the CRDs still come from the GAIE module
    builds.crd_dir().mkdir(parents=True)
    (builds.crd_dir() / "pool.yaml").write_text("kind: CustomResourceDefinition\n")
    found = builds.find()
    assert (found.etcd, found.kube_apiserver, found.source) == (assets / "etcd", assets / "kube-apiserver", str(assets))


# -- certificates and kubeconfig --------------------------------------------------------------------

def test_the_serving_certificate_is_for_loopback_and_signed_by_the_ca(tmp_path):
    controlplane.write_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert server.issuer == ca.subject
    server.verify_directly_issued_by(ca)
    assert {p.name for p in tmp_path.iterdir()} == {"ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub",
                                                    "kubelet-client.crt", "kubelet-client.key"}
    client = x509.load_pem_x509_certificate((tmp_path / "kubelet-client.crt").read_bytes())
    assert client.issuer == ca.subject and "O=system:masters" in client.subject.rfc4514_string()


def test_a_kubeconfig_names_the_server_its_ca_a_token_and_the_namespace(tmp_path):
    plane = controlplane.ControlPlane(tmp_path)
    controlplane.write_certificates(plane.pki)
    plane.server = "https://127.0.0.1:6443"
    config = yaml.safe_load(plane.write_kubeconfig(tmp_path / "kubeconfig", "bed-ns").read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["token"] == plane.token and len(plane.token) == 32
    assert config["contexts"][0]["context"]["namespace"] == "bed-ns"


# -- the pool's objects -------------------------------------------------------------------------------

def test_pod_addresses_count_up_through_127_0_0_0_slash_8():
    assert [inference_pool.pod_address(i) for i in (0, 1, 253, 254, 998)] == [
        "127.0.0.2", "127.0.0.3", "127.0.0.255", "127.0.1.0", "127.0.3.232"]


@pytest.mark.parametrize("ip, why", [("10.1.2.3", r"outside 127\.0\.0\.0/8"), ("::1", "outside"),
                                     ("pod-a", "not an IP address")])
def test_a_pod_address_outside_loopback_is_refused_saying_why(ip, why):
    with pytest.raises(ValueError, match=why):
        inference_pool.check_pod_ip(ip)
    assert inference_pool.check_pod_ip("127.3.2.1") == "127.3.2.1"


def test_a_pods_status_is_what_a_kubelet_would_write():
    status = inference_pool.status_patch("127.0.0.5", ready=False)["status"]
    assert (status["phase"], status["podIP"], status["podIPs"]) == ("Running", "127.0.0.5", [{"ip": "127.0.0.5"}])
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "False", "ContainersReady": "False"}
    pod = inference_pool.pod_manifest("vllm-0", "ns", {"app": "vllm"}, 8000)
    assert pod["metadata"]["labels"] == {"app": "vllm"} and pod["spec"]["containers"][0]["ports"] == [
        {"containerPort": 8000}]


# -- which modes watch a pool, and what they are given ---------------------------------------------------

def test_gaie_epp_always_watches_a_pool_and_external_epp_when_its_command_says_so():
    def watches(mode, **options):
        return modes.get(mode).watches_pool(modes.options_for(Topology(mode=mode, options=options)))

    assert watches("gaie-epp")
    assert not watches("ext_proc") and not watches("external-epp", epp_address="127.0.0.1:9002")
    assert not watches("external-epp", epp_command="epp --port {grpc_port} --pods {named_endpoints}")
    for placeholder in external_epp.POOL_PLACEHOLDERS:
        assert watches("external-epp", epp_command=f"epp --port {{grpc_port}} --x {{{placeholder}}}")


def test_a_controller_epps_command_gets_the_kubeconfig_and_the_pool():
    command = "my-epp --grpc {grpc_port} --kubeconfig {kubeconfig} --ns {pool_namespace} --pool {pool_name}"
    topology = Topology(mode="external-epp", options={"epp_command": command})
    (epp,) = kit.plan_mode(topology, [Endpoint("vllm-0", "127.0.0.2", 8000)]).services
    target = kit.POOL_TARGET
    assert epp.argv[3:] == ["--kubeconfig", target.kubeconfig, "--ns", target.namespace, "--pool", target.name]
    assert epp.env["KUBECONFIG"] == target.kubeconfig
    with pytest.raises(ValueError, match="needs the testbed's control plane"):
        modes.plan(topology, PortAllocator(), [])


def test_crds_of_your_own_need_a_controller_epp_and_existing_files(tmp_path):
    crd = tmp_path / "crd.yaml"
    crd.write_text("kind: CustomResourceDefinition\n")
    with pytest.raises(ValueError, match="crds go into the control plane of a controller EPP"):
        modes.check(Topology(mode="external-epp", options={"epp_command": "e {grpc_port}", "crds": [str(crd)]}))
    with pytest.raises(ValueError, match="no such file"):
        modes.check(Topology(mode="external-epp", options={"epp_command": "e {grpc_port} {kubeconfig}",
                                                           "crds": [str(tmp_path / "gone.yaml")]}))
    topology = Topology(mode="external-epp", options={"epp_command": "e {grpc_port} {kubeconfig}", "crds": [str(crd)]})
    assert kit.plan_mode(topology, [Endpoint("vllm-0", "127.0.0.2", 8000)]).crds == [str(crd)]


# -- Envoy's EDS files ----------------------------------------------------------------------------------

def test_eds_files_hold_one_assignment_per_cluster_and_replace_the_old_at_once(tmp_path):
    eds.write(tmp_path, {"picked": [("127.0.0.2", 8000), ("127.0.0.3", 8000)], "pool": []}, version=3)
    picked = json.loads((tmp_path / "picked.json").read_text())
    assert picked["version_info"] == "3"
    (assignment,) = picked["resources"]
    assert assignment["@type"] == eds.TYPE and assignment["cluster_name"] == "picked"
    hosts = [e["endpoint"]["address"]["socket_address"] for e in assignment["endpoints"][0]["lb_endpoints"]]
    assert hosts == [{"address": "127.0.0.2", "port_value": 8000}, {"address": "127.0.0.3", "port_value": 8000}]
    assert json.loads((tmp_path / "pool.json").read_text())["resources"][0]["endpoints"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["picked.json", "pool.json"]  # no partial file left


def test_with_an_eds_folder_the_picked_and_pool_clusters_read_their_endpoints_from_it(monkeypatch, tmp_path):
    # The mode's plan names GAIE's binary, which a fresh machine has not built: the render is what is tested here.
    monkeypatch.setattr(gaie_epp.gaie_build, "build", lambda progress=print, **_: tmp_path / "epp")
    backends = [Endpoint("vllm-0", "127.0.0.2", 18001), Endpoint("vllm-1", "127.0.0.3", 18001)]
    plan = kit.plan_mode(Topology(mode="gaie-epp"), backends)
    base = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": backends, **plan.envoy_vars}
    config = yaml.safe_load(kit.render("gaie-epp", {**base, "eds_dir": "/run/bed/eds"}))
    assert config["node"] == {"id": "eppkit-gateway", "cluster": "eppkit"}
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    for name in ("picked", "pool"):
        assert clusters[name]["type"] == "EDS" and "load_assignment" not in clusters[name]
        source = clusters[name]["eds_cluster_config"]["eds_config"]["path_config_source"]
        assert source == {"path": f"/run/bed/eds/{name}.json", "watched_directory": {"path": "/run/bed/eds"}}
    static = yaml.safe_load(kit.render("gaie-epp", base))
    assert "node" not in static
    assert {c["name"]: c["type"] for c in static["static_resources"]["clusters"]}["picked"] == "STATIC"


# -- a picker's pool from the objects --------------------------------------------------------------------

def pod(name: str, ip: str | None, ready: bool = True, **labels) -> dict:
    return {"metadata": {"name": name, "labels": labels or {"app": "vllm"}},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_the_pool_is_the_ready_pods_the_selector_matches_on_each_target_port():
    spec = {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}]}
    pods = {"a": pod("a", "127.0.0.2"), "b": pod("b", "127.0.0.3", ready=False), "c": pod("c", None),
            "d": pod("d", "127.0.0.5", app="other"), "e": pod("e", "127.0.0.6", app="vllm", track="canary")}
    assert endpoints_for(spec, pods) == [("a", "127.0.0.2", 8000), ("e", "127.0.0.6", 8000)]
    spec["targetPorts"].append({"number": 8001})
    assert endpoints_for(spec, {"a": pods["a"]}) == [("a-0", "127.0.0.2", 8000), ("a-1", "127.0.0.2", 8001)]
    assert endpoints_for(None, pods) == []


def test_a_change_keeps_the_load_figures_of_the_endpoints_that_stay():
    pool = Pool([])
    watcher = KubePool(pool, "kubeconfig", "ns", "vllm-pool")
    watcher.spec = {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}]}
    watcher.pods = {"a": pod("a", "127.0.0.2"), "b": pod("b", "127.0.0.3")}
    watcher._apply()
    first = pool.find("a")
    first.waiting = 7.0
    watcher._on_pod("MODIFIED", pod("b", "127.0.0.3", ready=False))
    watcher._on_pod("ADDED", pod("c", "127.0.0.4"))
    watcher._apply()
    assert [ep.name for ep in pool.endpoints] == ["a", "c"] and pool.find("a") is first and first.waiting == 7.0
    watcher._on_pool("DELETED", None)
    watcher._apply()
    assert pool.endpoints == []


def test_a_pool_from_kubernetes_replaces_endpoints_and_needs_a_kubeconfig(monkeypatch):
    import argparse

    from eppkit.services.picker import settings

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(ValueError, match="two sources of the pool"):
        build_picker(parser.parse_args(["--pool-name", "p", "--endpoints", "127.0.0.2:8000"]))
    with pytest.raises(ValueError, match="needs a kubeconfig"):
        build_picker(parser.parse_args(["--pool-name", "p"]))
    picker, background = build_picker(parser.parse_args(["--pool-name", "p", "--kubeconfig", "k", "--pool-namespace",
                                                         "ns"]))
    watcher = background[0]
    assert isinstance(watcher, KubePool) and watcher.pool is picker.pool
    assert (watcher.kubeconfig, watcher.namespace, watcher.name) == ("k", "ns", "p")
    objectives = background[1]  # the pool's InferenceObjectives, read into the picker's priorities
    assert isinstance(objectives, KubeObjectives) and objectives.objectives is picker.objectives
    assert (objectives.namespace, objectives.pool_name) == ("ns", "p")
    assert background[2].keep_when_empty


def test_a_shared_control_plane_started_beside_is_held_by_its_own_thread_until_stopped(monkeypatch, tmp_path):
    import threading

    started, stopped = [], []

    class Plane:
        def __init__(self, run_dir, **_):
            pass

        def start(self):
            started.append(threading.current_thread().name)
            return self

        def is_running(self):
            return True

        def stop(self):
            stopped.append(1)

    monkeypatch.setattr(controlplane, "ControlPlane", Plane)
    shared = controlplane.SharedControlPlane(lambda: tmp_path)
    shared.start_beside()
    from eppkit.core.polling import poll

    plane = poll(lambda: shared.started, timeout_s=2, interval_s=0.01, describe="the control plane started beside")
    assert shared.get() is plane  # the one started beside, never a second
    assert started == ["eppkit-control-plane"]
    holder = next(t for t in threading.enumerate() if t.name == "eppkit-control-plane")
    assert holder.is_alive()  # its processes die with the thread that started them: it stays
    shared.stop()
    holder.join(timeout=2)
    assert stopped == [1] and not holder.is_alive()
