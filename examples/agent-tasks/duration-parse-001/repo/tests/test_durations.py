import pytest

from durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90s", 90),
        ("1h30m", 5400),
        ("2d 4h", 187200),
        ("1h 2m 3s", 3723),
        ("  10m  ", 600),
        ("1H", 3600),
        ("45", 45),
        ("2.5", 2.5),
    ],
)
def test_parse_valid(text, seconds):
    assert parse_duration(text) == seconds


def test_numbers_pass_through():
    assert parse_duration(30) == 30.0
    assert parse_duration(0.25) == 0.25


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_is_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (59, "59s"), (5400, "1h30m"), (187200, "2d4h"), (3723, "1h2m3s")],
)
def test_format(seconds, text):
    assert format_duration(seconds) == text


def test_format_rejects_negative():
    with pytest.raises(ValueError):
        format_duration(-1)


@pytest.mark.parametrize("seconds", [1, 61, 3600, 90061])
def test_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds
