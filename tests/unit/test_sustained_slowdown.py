"""The soak's slow-down rule moves with the machine: the bound on the EPP hop's last quarter is the first quarter's
times how much slower the pods answered the same requests (never tighter than without them)."""

from eppkit.conformance.checks import sustained


def test_the_bound_moves_with_how_much_slower_the_pods_answered():
    assert sustained._machine([12.0, 13.0, 12.5, 36.0], 36.0) == 3.0  # the machine got 3x slower: the bound too
    assert sustained._machine([12.0, 13.0, 12.5, 6.0], 6.0) == 1.0  # faster: the bound stays
    assert sustained._machine([2.0, 2.0, 2.0, 15.0], 15.0) == 1.5  # a first quarter of a few ms is taken as 10 ms
    assert sustained._machine([None, None, None, None], None) == 1.0  # no record of the pods: the plain bound


def test_a_quarters_p99_is_the_median_of_its_windows():
    quarter = [1.0] * 400 + [100.0] * 100  # one window of five at 100 ms: a busy second, not the EPP
    assert sustained._p99s([quarter], sustained.WINDOWS) == [1.0]
    assert sustained._p99s([[100.0] * 500], sustained.WINDOWS) == [100.0]  # every window: the EPP
