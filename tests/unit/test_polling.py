"""eppkit.core.polling.poll: the one wait of the kit (no processes)."""

import pytest

from eppkit.core.polling import PollTimeout, poll

pytestmark = pytest.mark.unit


def test_returns_the_first_value_the_condition_accepts():
    values = iter([0, 0, 3, 4])
    assert poll(lambda: next(values), timeout_s=5, interval_s=0) == 3
    values = iter(["a", "ab", "abc"])
    assert poll(lambda: next(values), until=lambda v: len(v) > 1, timeout_s=5, interval_s=0) == "ab"


def test_the_timeout_names_what_was_awaited_and_the_last_value():
    with pytest.raises(PollTimeout, match=r"Envoy ready: not reached within 0.05 s \(last: 'LIVE\?'\)"):
        poll(lambda: "LIVE?", until=lambda v: v == "LIVE", timeout_s=0.05, interval_s=0.01, describe="Envoy ready")
    assert issubclass(PollTimeout, AssertionError)


def test_listed_exceptions_mean_not_yet_and_others_propagate():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("refused")
        return "up"

    assert poll(flaky, timeout_s=5, interval_s=0, retry_on=(ConnectionError,)) == "up"
    with pytest.raises(PollTimeout, match="last: ConnectionError: refused") as err:
        poll(lambda: (_ for _ in ()).throw(ConnectionError("refused")), timeout_s=0.02, interval_s=0.01,
             retry_on=(ConnectionError,))
    assert isinstance(err.value.__cause__, ConnectionError)
    with pytest.raises(KeyError):
        poll(lambda: {}["x"], timeout_s=5, retry_on=(ConnectionError,))


def test_a_describe_function_writes_the_whole_message():
    with pytest.raises(PollTimeout, match="^still 2 left$"):
        poll(lambda: 2, until=lambda n: n == 0, timeout_s=0, describe=lambda n, exc: f"still {n} left")
