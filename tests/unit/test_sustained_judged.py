"""The suite's sustained-load tries (tests/support/verdicts.py): judged again only while it says "not run"."""

import pytest

from tests.support import verdicts

pytestmark = pytest.mark.unit


def report(status: str) -> dict:
    return {"checks": [{"id": "serves", "status": "pass"},
                       {"id": "sustained-load", "status": status, "message": f"it was {status}"}]}


@pytest.fixture
def judged(monkeypatch):
    monkeypatch.setattr(verdicts, "SUSTAINED_PAUSE_S", 0.0)

    def judge_each(*statuses):
        made = iter(statuses)
        calls = []

        def judge():
            calls.append(1)
            return report(next(made))
        return lambda first=None: (verdicts.sustained_judged(judge, first), len(calls))
    return judge_each


def test_not_run_is_judged_again_until_it_is_judged(judged):
    (_, check), calls = judged("not run", "not run", "pass")()
    assert (check["status"], calls) == ("pass", 3)


def test_a_fail_is_final_and_not_run_every_time_stays_not_run(judged):
    (_, check), calls = judged("fail", "pass")()
    assert (check["status"], calls) == ("fail", 1)
    (_, check), calls = judged("not run", "not run", "not run", "pass")()
    assert (check["status"], calls) == ("not run", verdicts.SUSTAINED_TRIES)


def test_a_first_report_is_judged_again_only_when_not_run(judged):
    first = report("pass")
    (again, check), calls = judged("fail")(first)
    assert (again is first, check["status"], calls) == (True, "pass", 0)
    (again, check), calls = judged("pass")(report("not run"))
    assert (again is first, check["status"], calls) == (False, "pass", 1)
