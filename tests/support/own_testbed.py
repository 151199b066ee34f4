"""For the unit tests of the checks that run on a testbed of their own (routing, saturation): as much of the
conformance harness as they use, three pods and no Envoy, and a load that sends nothing."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace


class NoLoad:
    """A busy load that never reaches the pods (nothing is sent)."""

    def __init__(self, *_, **__):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def close(self):
        pass


class OwnTestbedHarness:
    """The harness of a check on a testbed of its own (:meth:`Harness.own`): ``testbed`` has a pod at each of
    ``addresses``; ``log`` says what the check did: a 1 for each request it sent, ``"released"`` when it let go of
    the testbed."""

    def __init__(self, target, addresses: list[str]):
        self.target = target
        pods = [SimpleNamespace(name=f"vllm-{i}", address=address, model="mock-llm")
                for i, address in enumerate(addresses)]
        self.testbed = SimpleNamespace(backends=pods, pool=None)
        self.log: list = []

    @contextmanager
    def own(self, variant, topology=None, **options):
        try:
            yield self.testbed
        finally:
            self.log.append("released")

    def client(self, bed):
        return None

    def send(self, *args, **kwargs):
        self.log.append(1)
