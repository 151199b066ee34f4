"""One cluster handle (eppkit/cluster/handle.py): made once where the user names a cluster and passed down, the
environment only carrying it to child processes; the kit's one-node cluster and a cluster of your own are two
implementations of one Protocol, and the kubernetes launcher has one class for both."""

from __future__ import annotations

import json
import os
import re

import pytest

from eppkit import runtimes
from eppkit.cluster import handle, remote
from eppkit.cluster.apipod import ApiSite
from eppkit.cluster.nodepod import NodeSite
from eppkit.components.controlplane import ControlPlane
from eppkit.components.kubeapi import ApiServer
from tests.support.imports import ROOT

pytestmark = pytest.mark.unit


def _kubeconfig(tmp_path, server: str = "https://10.0.0.1:6443"):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t0k"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


@pytest.fixture
def no_cluster_named(monkeypatch):
    """An environment that names no cluster of your own."""
    for key in (handle.KUBECONFIG_ENV, handle.REGISTRY_ENV):
        monkeypatch.delenv(key, raising=False)


def _members(protocol) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("kind", [handle.KitCluster, remote.OwnCluster])
def test_the_kits_cluster_and_one_of_your_own_answer_the_whole_cluster_protocol(kind):
    assert not _members(handle.Cluster) - set(dir(kind)) - {"kubeconfig"}  # an attribute of each one made


@pytest.mark.parametrize("kind", [ControlPlane, remote.OwnPlane])
def test_the_kits_control_plane_and_a_cluster_of_your_owns_api_server_are_one_kind_of_pool_home(kind):
    assert not _members(ApiServer) - set(dir(kind)) - {"server"}


def test_a_cluster_named_is_handed_down_and_goes_to_a_child_by_its_spawn_environment_only(tmp_path, monkeypatch,
                                                                                        no_cluster_named):
    before = dict(os.environ)
    own = handle.named(_kubeconfig(tmp_path), "registry.example:5000/")
    assert dict(os.environ) == before  # nothing written into this process's environment
    runtime = runtimes.get("kubernetes", own)
    assert runtime.cluster is own and runtimes.get("kubernetes").cluster is not own  # passed down, not a slot
    assert runtimes.get("local", own) is runtimes.get("local")  # a runtime that is no cluster is as it is
    assert isinstance(handle.named(), handle.KitCluster)  # named by nobody: the kit's one-node cluster
    for key, value in own.env().items():  # a child process, given the cluster in its spawn environment: its settings
        monkeypatch.setenv(key, value)
    child = handle.named()
    assert (type(child), child.kubeconfig, child.image("eppkit/envoy:x")) == (
        remote.OwnCluster, own.kubeconfig, "registry.example:5000/eppkit/envoy:x")
    assert handle.KitCluster().env() == {handle.KUBECONFIG_ENV: "", handle.REGISTRY_ENV: ""}  # a parent's is not its


def test_a_registry_without_a_kubeconfig_or_a_missing_file_is_refused_in_words(tmp_path, monkeypatch,
                                                                               no_cluster_named):
    with pytest.raises(ValueError, match="give --kubeconfig too"):
        handle.named(None, "registry.example")
    with pytest.raises(ValueError, match="no such file"):
        handle.named(tmp_path / "none")
    monkeypatch.setenv(handle.KUBECONFIG_ENV, str(_kubeconfig(tmp_path)))  # the option's default
    assert handle.named(None, "registry.example").image("eppkit/x") == "registry.example/eppkit/x"


def test_a_cluster_of_your_own_parses_its_kubeconfig_once_and_builds_one_client(tmp_path):
    own = remote.OwnCluster(_kubeconfig(tmp_path))
    assert own.client() is own.client()
    assert own.plane.server == "https://10.0.0.1:6443"
    assert own.access().headers == {"Authorization": "Bearer t0k"} and own.access() is own.access()


def test_its_pods_are_reached_through_its_api_server_and_forwarded_only_when_its_node_is_another_machine(tmp_path):
    own = remote.OwnCluster(_kubeconfig(tmp_path))
    own._node = remote.ChosenNode("worker-1", False, "10.0.0.7")  # chosen once: not asked again
    site = own.site([8000, 8000, 9000], lambda: "eppkit/services:x")
    assert isinstance(site, ApiSite) and site.node == "worker-1" and site.helper_image == "eppkit/services:x"
    assert site.forward[1] == (8000, 9000) and site.pull == "IfNotPresent"
    assert own.pods_host() == "10.0.0.7" and own.api_server_for_pods() is None and not own.reaches_this_host()
    own._node = own._node._replace(mine=True)
    assert own.site([8000], lambda: "x").forward is None and own.api_server_for_pods() == "https://10.0.0.1:6443"


def test_the_kits_node_mounts_the_run_folder_and_a_cluster_of_your_own_is_given_each_file(tmp_path):
    run, other = tmp_path / "run", tmp_path / "lua"
    (run / "eds").mkdir(parents=True)
    config = run / "envoy.yaml"
    named = [config, run / "eds" / "picked.json", other]
    kit = handle.KitCluster()
    assert kit.pod_paths(config, run, named, run / "eds") == ([run, other], set())
    assert isinstance(kit.site([8000], lambda: "x"), NodeSite)  # its client is asked only when a Pod is made
    own = remote.OwnCluster(_kubeconfig(tmp_path))
    assert own.pod_paths(config, run, named, run / "eds") == ([config, config, other, run / "eds"], {run / "eds"})


# What the handle replaces: nobody reads the cluster back from the environment in-process, and one function builds
# a lightkube client (eppkit.components.kubeapi.client); the picker's EPP (a service, its own process) builds its own.
def _sources():
    for folder in ("eppkit", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_nobody_reads_the_cluster_from_the_environment_nor_writes_it_there():
    readers = [name for name, text in _sources()
               if re.search(r"environ(\.get)?[\[(]\s*(KUBECONFIG_ENV|REGISTRY_ENV|\"EPPKIT_KUBECONFIG\")", text)
               or re.search(r"handle\.(use|current)\(", text)]
    assert readers == []


def test_one_function_builds_a_lightkube_client():
    builders = [name for name, text in _sources() if re.search(r"\b(Async)?Client\(\s*(KubeConfig|config)", text)
                or re.search(r"kind\(config", text)]
    assert builders == ["eppkit/components/kubeapi.py"]
