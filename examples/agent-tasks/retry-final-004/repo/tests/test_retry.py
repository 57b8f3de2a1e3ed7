import pytest

from retrying import backoff_delays, retry


class Flaky:
    """Fails ``failures`` times with ``error``, then returns ``value``."""

    def __init__(self, failures, error=ConnectionError, value="ok"):
        self.failures = failures
        self.error = error
        self.value = value
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("failure %d" % self.calls)
        return self.value


def test_first_try_success_does_not_sleep():
    slept = []
    assert retry(Flaky(0), sleep=slept.append) == "ok"
    assert slept == []


def test_success_after_failures_sleeps_with_backoff():
    slept = []
    func = Flaky(2)
    assert retry(func, attempts=3, sleep=slept.append) == "ok"
    assert func.calls == 3
    assert slept == [0.5, 1.0]


def test_delays_are_capped():
    slept = []
    assert retry(Flaky(3), attempts=4, base=1.0, factor=10.0, max_delay=8.0, sleep=slept.append) == "ok"
    assert slept == [1.0, 8.0, 8.0]


def test_other_exceptions_propagate_immediately():
    slept = []
    func = Flaky(1, error=KeyError)
    with pytest.raises(KeyError):
        retry(func, attempts=5, retry_on=(ConnectionError,), sleep=slept.append)
    assert func.calls == 1
    assert slept == []


def test_backoff_delays():
    assert list(backoff_delays(4)) == [0.5, 1.0, 2.0]
    assert list(backoff_delays(1)) == []
    assert list(backoff_delays(5, base=3.0, factor=3.0, max_delay=20.0)) == [3.0, 9.0, 20.0, 20.0]
