"""Hidden behaviour tests for retry-final-004."""

import pytest

from retrying import retry


class AlwaysFails:
    def __init__(self, error=ConnectionError):
        self.error = error
        self.calls = 0

    def __call__(self):
        self.calls += 1
        raise self.error("failure %d" % self.calls)


def test_exhausted_retries_raise_the_last_error():
    func = AlwaysFails()
    with pytest.raises(ConnectionError, match="failure 3"):
        retry(func, attempts=3, sleep=lambda seconds: None)
    assert func.calls == 3


def test_no_sleep_after_the_final_attempt():
    slept = []
    with pytest.raises(ConnectionError):
        retry(AlwaysFails(), attempts=3, sleep=slept.append)
    assert slept == [0.5, 1.0]


def test_single_attempt_never_sleeps():
    slept = []
    with pytest.raises(TimeoutError):
        retry(AlwaysFails(TimeoutError), attempts=1, sleep=slept.append)
    assert slept == []


@pytest.mark.parametrize("attempts", [0, -2])
def test_attempts_below_one_rejected(attempts):
    func = AlwaysFails()
    with pytest.raises(ValueError):
        retry(func, attempts=attempts, sleep=lambda seconds: None)
    assert func.calls == 0
