"""Port leases hold across processes (pytest-xdist workers, two sessions, `eppkit up`): processes that pick
from one seed get disjoint ports, and the ports of a process that dies are free again.

Each holder is a Python process that takes ports from ``PortAllocator(random.Random(0))``, prints them,
and holds them until it is killed: without leases every one of them would print the same list.
"""

import json
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

HOLDER = """
import json, random, sys, time
from eppkit.components.ports import PortAllocator
alloc = PortAllocator(random.Random(0))
print(json.dumps([alloc.port() for _ in range(int(sys.argv[1]))]), flush=True)
time.sleep(120)
"""


def hold(count: int) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(count)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, f"the holder exited with {proc.wait(timeout=10)}"
    return proc, json.loads(line)


def test_processes_picking_from_one_seed_get_disjoint_ports_and_a_dead_ones_come_free():
    holders = []
    try:
        for _ in range(4):
            holders.append(hold(25))
        ports = [p for _, got in holders for p in got]
        assert len(ports) == len(set(ports)) == 100, "two processes held one port"
        # SIGKILL: no release() runs; the kernel drops the dead process's locks.
        first, first_ports = holders.pop(0)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        again, again_ports = hold(25)
        holders.append((again, again_ports))
        assert again_ports == first_ports, "the dead holder's ports, in the seed's order, are free again"
    finally:
        for proc, _ in holders:
            proc.kill()
            proc.wait(timeout=10)
