"""Pools that change while requests flow, per EPP that watches the pool: GAIE's EPP v1.5.0 (its built-in
plugins) and the kit's EPP following the same InferencePool, each through a real Envoy, against a real
kube-apiserver (the session's control plane, the testbed's own namespace).

A change is made as a cluster makes it (the Pod's status written, a Pod created or deleted, the
InferencePool edited: ``bed.pool``, eppkit/runtimes/pool.py); the load keeps flowing meanwhile
(tests/support/churn.py), and what each request met is judged from its answer:

- a pod turned not Ready stops being picked within :data:`STOP_PICKING_S` (measured: the last request it
  answered that started after the change; reported as a test property);
- a pod added under load gets traffic;
- during a rolling replacement of every pod, no request fails where a fallback could have served it;
- a pod that crashes (its server killed before its Ready condition says so) fails only the requests in
  flight there and those the EPP sent it before it learned that Envoy's fallbacks could not cover (both
  counted, reported);
- an edited selector moves the traffic to the pods it selects.
"""

import time

import pytest

from eppkit.modes import gaie_epp
from tests.support.churn import WATCHERS, BackgroundLoad, details, served, watcher_topology, where_planned
from tests.support.contract import CONTRACT
from tests.support.reliability import require_gaie_epp

pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_prepare("control-plane")]  # every watcher watches a pool

# How long an EPP may keep picking a pod after its change is written: watch delivery plus the EPP's own
# work, on a shared 2-core machine. Measured 6-300 ms (docs/benchmarks.md); the bound leaves room for load.
STOP_PICKING_S = 3.0


@pytest.fixture(params=[pytest.param(w, marks=pytest.mark.eppkit_prepare(w)) if w == gaie_epp.MODE.name else w
                        for w in WATCHERS])
def watcher(request) -> str:
    if request.param == gaie_epp.MODE.name:
        require_gaie_epp()
    return request.param


def most_served(sent) -> str:
    counts = {pod: n for pod, n in served(sent).items() if not pod.startswith("!")}
    return max(counts, key=counts.get)


@CONTRACT  # the pool's pods changed in the runtime
def test_a_pod_that_turns_not_ready_is_no_longer_picked(eppkit_testbed_factory, watcher, record_property):
    bed = eppkit_testbed_factory(watcher_topology(watcher, ("vllm-0", "vllm-1", "vllm-2")))
    with BackgroundLoad(bed) as load:
        victim = most_served(load.wait_served(20))
        changed = time.monotonic()
        bed.pool.set_ready(victim, False)
        load.wait_served(20, since=changed + STOP_PICKING_S)
    after = load.sent(since=changed)
    picked_late = [s.started - changed for s in after if s.pod == victim]
    record_property("not_ready_still_picked_s", round(max(picked_late, default=0.0), 3))
    assert not [s for s in picked_late if s > STOP_PICKING_S], (
        f"{watcher} still picked {victim} {max(picked_late):.2f} s after it turned not Ready: {served(after)}")
    assert all(s.ok for s in load.sent()), f"{served(load.sent())}: {details(load.sent())}"
    assert len({s.pod for s in load.sent(since=changed + STOP_PICKING_S)}) == 2  # the other two serve


def test_a_pod_added_under_load_gets_traffic(eppkit_testbed_factory, watcher, record_property):
    bed = eppkit_testbed_factory(watcher_topology(watcher, ("vllm-0", "vllm-1")))
    with BackgroundLoad(bed) as load:
        load.wait_served(10)
        added = time.monotonic()
        pod = bed.pool.add_pod()  # returns once its mock answers, its Pod is Ready and Envoy has it
        assert (pod.name, pod.ready) == ("vllm-2", True) and where_planned(bed, 2, pod.ip), pod
        first = load.wait_for(lambda sent: any(s.pod == pod.name for s in sent), f"a request served by {pod.name}",
                              since=added, timeout_s=20)
    record_property("added_first_served_s", round(min(s.started for s in first if s.pod == pod.name) - added, 3))
    assert all(s.ok for s in load.sent()), f"{served(load.sent())}: {details(load.sent())}"


def test_a_rolling_replacement_fails_no_request_a_fallback_could_serve(eppkit_testbed_factory, watcher,
                                                                        record_property):
    bed = eppkit_testbed_factory(watcher_topology(watcher, ("vllm-0", "vllm-1", "vllm-2")))
    with BackgroundLoad(bed, workers=4) as load:
        load.wait_served(10)
        rolled = time.monotonic()
        # Each old pod: a new one up and Ready, the old one not Ready, 1 s for its requests to end, then it is
        # deleted (Envoy drops it: a late pick of it falls back), then its server stops.
        replaced = bed.pool.roll(drain_s=1.0)
        done = time.monotonic()
        load.wait_served(10, since=done)
    old, new = {o for o, _ in replaced}, {n for _, n in replaced}
    during = load.sent(since=rolled)
    failed = [s for s in during if not s.ok]
    # Cut mid-answer by its pod's end: the request had reached that pod, so no fallback could take it over.
    uncoverable = [s for s in failed if s.status == 200 and s.pod in old]
    record_property("rolling_requests", len(during))
    record_property("rolling_failed", len(failed))
    record_property("rolling_failed_uncoverable", len(uncoverable))
    print(f"\n{watcher}: rolling replacement {sorted(old)} -> {sorted(new)} in {done - rolled:.1f} s: "
          f"{len(during)} requests, {len(failed)} failed ({len(uncoverable)} cut mid-answer): {served(during)}")
    assert {p.name for p in bed.pool.pods()} == new
    assert set(served(load.sent(since=done + STOP_PICKING_S))) <= new
    assert failed == uncoverable, f"failures a fallback could have served: {served(failed)}: {details(failed)}"


@CONTRACT  # the pool's pods changed in the runtime
def test_a_crashed_pod_fails_only_what_was_there_or_sent_before_the_epp_knew(eppkit_testbed_factory, watcher,
                                                                          record_property):
    bed = eppkit_testbed_factory(watcher_topology(watcher, ("vllm-0", "vllm-1", "vllm-2")))
    with BackgroundLoad(bed, workers=4) as load:
        victim = most_served(load.wait_served(20))
        crashed = time.monotonic()
        bed.pool.set_ready(victim, False, stop_server=True)  # its server killed first, then not Ready
        marked = time.monotonic()
        load.wait_served(20, since=marked + STOP_PICKING_S)
    failed = [s for s in load.sent() if not s.ok]
    # Cut by the crash (their answer, if any came, was the victim's): nothing could save them.
    in_flight = [s for s in failed if s.started < crashed <= s.ended and s.pod in (victim, None)]
    picked_blind = [s for s in failed if crashed <= s.started <= marked + STOP_PICKING_S]
    record_property("crash_failed_in_flight", len(in_flight))
    record_property("crash_failed_uncovered", len(picked_blind))
    print(f"\n{watcher}: {victim} crashed; failed: {len(in_flight)} in flight there, {len(picked_blind)} sent "
          f"before the EPP knew and not covered by a fallback; after: {served(load.sent(since=crashed))}")
    assert sorted(failed, key=id) == sorted(in_flight + picked_blind, key=id), (
        f"failures outside the crash's window: {served([s for s in failed if s not in in_flight + picked_blind])}")
    assert not [s for s in load.sent(since=marked + STOP_PICKING_S) if s.pod == victim]


def test_an_edited_selector_moves_the_traffic_to_the_pods_it_selects(eppkit_testbed_factory, watcher):
    bed = eppkit_testbed_factory(watcher_topology(watcher, ("vllm-0", "vllm-1")))
    canary = bed.pool.add_pod("canary-0", labels={"app": "vllm", "track": "canary"})
    with BackgroundLoad(bed) as load:
        load.wait_served(10)
        edited = time.monotonic()
        bed.pool.edit(selector={"app": "vllm", "track": "canary"})
        after = load.wait_served(15, since=edited + STOP_PICKING_S)
    assert served(after) == {canary.name: len(after)}, served(after)
    assert all(s.ok for s in load.sent()), f"{served(load.sent())}: {details(load.sent())}"


@CONTRACT  # where the pool's pods are is the runtime's: loopback addresses, or a cluster's pod network
def test_each_pod_serves_at_its_own_address_and_the_runtime_says_it_is_ready(eppkit_testbed_factory):
    import requests

    bed = eppkit_testbed_factory(watcher_topology("kit-epp", ("vllm-0", "vllm-1")))
    pods = bed.pool.pods()
    assert [(p.name, p.ready) for p in pods] == [("vllm-0", True), ("vllm-1", True)]
    assert all(where_planned(bed, i, p.ip) for i, p in enumerate(pods)) and len({p.ip for p in pods}) == 2, pods
    port = bed.pool.objects.target_ports()[0]
    for pod in pods:  # each answers at its own address, as itself
        answer = requests.get(f"http://{pod.ip}:{port}/health", timeout=5)
        assert answer.status_code == 200, (pod, answer.status_code)
    if bed.runtime == "kubernetes":  # real Pods: the kubelet ran each, on the pod network, and made it Ready
        from lightkube.resources.core_v1 import Pod

        client = bed.pool.plane.client(bed.pool.target.namespace)
        for pod in pods:
            real = client.get(Pod, pod.name)
            assert real.spec.hostNetwork is not True and real.status.podIP == pod.ip
            assert real.status.containerStatuses[0].ready is True  # the kubelet's probe: nothing else writes it
        client.close()
