import pytest

from termtext import char_width, display_width, ellipsize, pad


@pytest.mark.parametrize(
    "text, width",
    [("", 0), ("abc", 3), ("東京", 4), ("e\u0301", 1), ("ｶﾀｶﾅ", 4), ("ＡＢ", 4), ("a\u200bb", 2)],
)
def test_display_width(text, width):
    assert display_width(text) == width


def test_char_width():
    assert char_width("a") == 1
    assert char_width("語") == 2
    assert char_width("\u0301") == 0


def test_pad():
    assert pad("ab", 4) == "ab  "
    assert pad("東", 4) == "東  "
    assert pad("toolong", 3) == "toolong"


@pytest.mark.parametrize("text", ["short", "exactly10!", ""])
def test_ellipsize_leaves_fitting_text_alone(text):
    assert ellipsize(text, 10) == text


def test_ellipsize_fitting_text_with_custom_placeholder():
    assert ellipsize("abc", 3, placeholder="...") == "abc"
