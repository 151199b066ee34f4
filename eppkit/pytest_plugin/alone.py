"""Tests that must run alone: ``@pytest.mark.eppkit_alone("why")``.

A test that asserts timing (a span within a few ms of its configured length, an answer within a
second) or loads the machine on purpose holds only when nothing else of the run competes for its
CPU. Under pytest-xdist such a test waits until the other workers' tests in flight have finished,
runs while they wait, and lets them go on after; without workers there is nothing to wait for.
Alone tests are one ``xdist_group`` (:mod:`eppkit.pytest_plugin.parallel`): under ``--dist loadgroup``
they run back to back on one worker, which keeps the lock from one to the next, so the other
workers stop for them once rather than once each.

Two lock files in a folder of this run (named by the run's tag, so two runs on one machine do not
wait on each other) make a readers-writer lock that a waiting alone test cannot be starved of:

- every test passes the *turnstile* (a shared flock, taken and dropped) and then holds *running*
  shared for its whole protocol (setup, call, teardown);
- an alone test holds the turnstile exclusive, so no new test starts, then takes *running*
  exclusive, which it gets once the tests in flight have ended.

Hand-written over ``fcntl.flock`` (the `filelock` library's locks are exclusive only, and its
readers-writer lock does not say whether a waiting writer holds new readers back). Every wait polls
with a deadline; the kernel drops the locks of a worker that dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from eppkit.pytest_plugin.parallel import ALONE, run_folder, worker_id

WAIT_S = 1800.0  # the longest an alone test waits for the tests in flight, or a test for alone ones
POLL_S = 0.05


class _Flock:
    """One flock on one file, taken by polling (bounded), dropped by closing the file."""

    def __init__(self, path: Path, mode: int, what: str):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                try:
                    fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"waited {WAIT_S:.0f} s for {what} ({path})") from None
                    time.sleep(POLL_S)
        except BaseException:
            os.close(self.fd)
            raise

    def release(self) -> None:
        os.close(self.fd)


def take(folder: Path, *, alone: bool) -> list[_Flock]:
    """This run's lock for one test: shared, or (``alone``) with nothing else running; release each after."""
    folder.mkdir(mode=0o700, exist_ok=True)
    turnstile, running = folder / "turnstile.lock", folder / "running.lock"
    if not alone:
        _Flock(turnstile, fcntl.LOCK_SH, "an alone test to end").release()  # through the turnstile
        return [_Flock(running, fcntl.LOCK_SH, "an alone test to end")]
    gate = _Flock(turnstile, fcntl.LOCK_EX, "the other alone tests")
    try:
        return [gate, _Flock(running, fcntl.LOCK_EX, "the tests in flight to end")]
    except BaseException:
        gate.release()
        raise


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker(ALONE) is not None


HELD = pytest.StashKey[list]()  # config -> the locks an alone test keeps for the next one


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if worker_id(item.config) is None:  # no workers: nothing runs beside this test
        return (yield)
    alone = _alone(item)
    held = item.config.stash.get(HELD, [])
    locks = held if alone and held else take(run_folder(), alone=alone)
    item.config.stash[HELD] = []
    try:
        return (yield)
    finally:
        if alone and _alone(nextitem):
            item.config.stash[HELD] = locks
        else:
            for lock in reversed(locks):
                lock.release()
