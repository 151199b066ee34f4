"""The soak's slow-down rule moves with the machine: the bound on the EPP hop's last quarter is the first quarters'
times how much slower the pods answered the same requests (never tighter than without them); it judges the median
as well as the p99."""

import random

from eppkit.conformance.checks import sustained


def test_the_bound_moves_with_how_much_slower_the_pods_answered():
    assert sustained._machine(12.0, 36.0) == 3.0  # the machine got 3x slower: the bound too
    assert sustained._machine(12.0, 6.0) == 1.0  # faster: the bound stays
    assert sustained._machine(2.0, 15.0) == 1.5  # a baseline of a few ms is taken as 10 ms
    assert sustained._machine(None, None) == 1.0  # no record of the pods: the plain bound


def test_the_last_quarter_is_judged_against_the_faster_of_the_first_two():
    # CI's suite, slows-per-stream under the echo EPP: a first quarter slow with the machine's other starts
    assert sustained._baseline([204.5, 119.7, 233.3, 370.2]) == 1
    assert sustained._baseline([20.0, 31.0, 25.0, 22.0]) == 0
    assert sustained._baseline([None, 40.0, 41.0, 39.0]) == 1
    assert sustained._baseline([None, None, None, None]) is None


def test_a_quarters_p99_is_the_median_of_its_windows():
    quarter = [1.0] * 400 + [100.0] * 100  # one window of five at 100 ms: a busy second, not the EPP
    assert sustained._quantiles([quarter], 99, sustained.WINDOWS) == [1.0]
    assert sustained._quantiles([[100.0] * 500], 99, sustained.WINDOWS) == [100.0]  # every window: the EPP


def _fault(noise_ms, seed=7):
    """slows-per-stream's hop over 2,000 requests ((n / 1,000)^2 x 100 ms), on a machine whose noise adds up to
    ``noise_ms`` to one request in 20 (the tail) and a few ms to the rest."""
    rng = random.Random(seed)
    hop = [(n / 1000) ** 2 * 100 + rng.uniform(1, 5) + (rng.uniform(0, noise_ms) if rng.random() < 0.05 else 0)
           for n in range(2000)]
    return [hop[i * 500:(i + 1) * 500] for i in range(4)]


def test_a_decision_that_slows_every_request_fails_on_its_median_when_the_tails_noise_hides_it_from_the_p99():
    quarters = _fault(noise_ms=400)
    pods = [[20.0] * 500] * 4
    said, over = sustained._over_bounds(quarters, pods)
    assert "p99" not in {o.stat.name for o in over}  # the tail's noise: the p99 alone passed it (CI's suite)
    assert [o.stat.name for o in over] == ["median"], said


def test_a_steady_epp_on_a_noisy_machine_is_over_neither_bound():
    rng = random.Random(3)
    quarters = [[rng.uniform(2, 8) + (rng.uniform(0, 300) if rng.random() < 0.05 else 0) for _ in range(500)]
                for _ in range(4)]
    said, over = sustained._over_bounds(quarters, [[20.0] * 500] * 4)
    assert over == [], said
