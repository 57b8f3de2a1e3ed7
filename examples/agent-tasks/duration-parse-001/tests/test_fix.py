"""Hidden behaviour tests for duration-parse-001."""

import pytest

from durations import parse_duration


def test_fractional_hours():
    assert parse_duration("1.5h") == 5400


def test_fractional_component_among_others():
    assert parse_duration("1h 0.5m") == 3630


def test_fractional_days_uppercase():
    assert parse_duration("0.25D") == 21600


@pytest.mark.parametrize("text", ["5x", "ten minutes", "h"])
def test_unknown_units_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text", ["10 mins", "1h30", "1h and 5m", "1.5.2h"])
def test_partially_valid_input_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)
