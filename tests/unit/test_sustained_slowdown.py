"""The soak's slow-down rule moves with the machine: the bound on the EPP hop's last quarter is the first quarter's
times how much slower the pods answered the same requests (never tighter than without them)."""

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
    assert sustained._p99s([quarter], sustained.WINDOWS) == [1.0]
    assert sustained._p99s([[100.0] * 500], sustained.WINDOWS) == [100.0]  # every window: the EPP
