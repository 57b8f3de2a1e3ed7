"""Hidden behaviour tests for ellipsize-width-005."""

import pytest

from termtext import display_width, ellipsize


def test_ascii_result_fits_width():
    assert ellipsize("hello world", 8) == "hello w…"


def test_multi_character_placeholder():
    assert ellipsize("abcdefghij", 6, placeholder="...") == "abc..."


def test_wide_characters_are_counted_as_two_columns():
    assert ellipsize("東京都庁舎", 6) == "東京…"


def test_wide_text_shorter_in_code_points_than_width():
    assert ellipsize("日本語テキスト", 8) == "日本語…"


def test_combining_accent_stays_with_its_letter():
    text = "re\u0301sume\u0301 writing"
    assert ellipsize(text, 7) == "re\u0301sume\u0301…"


@pytest.mark.parametrize("width", range(1, 12))
def test_never_wider_than_width(width):
    for text in ("hello world", "東京都庁舎です", "ｶﾀｶﾅとカタカナ"):
        assert display_width(ellipsize(text, width)) <= width, (text, width)
