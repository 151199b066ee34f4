"""What the tests of a verdict share: local testbeds on one Jaeger, each made by the verdict."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.testbed import new_run_dir


@contextmanager
def local_beds(jaeger_name: str) -> Iterator[tuple]:
    """(make, beds): ``make(topology)`` starts a local testbed on the shared Jaeger and keeps it in ``beds``, for
    whoever judges with it to stop."""
    beds: list = []
    with create_jaeger("local", new_run_dir(jaeger_name)) as jaeger:
        def make(topology):
            bed = create(topology, runtime="local", jaeger=jaeger)
            beds.append(bed)
            return bed.start()

        yield make, beds
