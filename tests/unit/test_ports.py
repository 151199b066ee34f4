"""Ports are leased: two allocators never hand out the same port, and a released port can be had again.

Every allocator here starts from the same seed, so without leases each would pick the very same
ports in the very same order (tests/integration/test_port_leases.py does the same across processes).
"""

import random

import pytest

from eppkit.components import ports
from eppkit.components.ports import PortAllocator


@pytest.fixture
def leases(tmp_path):
    return tmp_path / "leases"


def allocator(leases) -> PortAllocator:
    leases.mkdir(exist_ok=True)
    return PortAllocator(random.Random(7), leases=leases)


def test_two_allocators_from_one_seed_hand_out_different_ports(leases):
    a, b = allocator(leases), allocator(leases)
    first = [a.port() for _ in range(20)]
    second = [b.port() for _ in range(20)]
    assert len(set(first)) == 20 and not set(first) & set(second)
    assert a.given == frozenset(first)


def test_a_released_port_is_handed_out_again(leases):
    a = allocator(leases)
    taken = a.port()
    assert allocator(leases).port() != taken
    a.release()
    assert a.given == frozenset()
    assert allocator(leases).port() == taken, "the seed's first port is free again"


def test_a_port_shared_by_several_addresses_is_leased_too(leases):
    a, b = allocator(leases), allocator(leases)
    shared = a.shared_port(["127.0.0.1"])
    assert shared in a.given and b.port() != shared


@pytest.mark.parametrize("low, expected", [
    (32768, (8768, 20767)),   # Linux's default: below where eppkit picked before leases (20768-32767)
    (20000, (8000, 19999)),   # a low ephemeral range: the 12,000 ports under it
    (2048, (20000, 30000)),
])
def test_ports_come_from_below_the_ephemeral_range(monkeypatch, low, expected):
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: (low, 60999))
    assert ports.port_range() == expected


def test_a_kubernetes_nodes_own_ports_are_never_handed_out(leases, monkeypatch):
    # 10248-10255: four of them a node's (10248, 10249, 10250, 10255); the four others come out, each once.
    monkeypatch.setattr(ports, "port_range", lambda: (10248, 10255))
    a = allocator(leases)
    assert {a.port() for _ in range(4)} == {10251, 10252, 10253, 10254}
