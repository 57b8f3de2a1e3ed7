import pytest

from slugs import slugify


@pytest.mark.parametrize(
    "title, slug",
    [
        ("Hello, World!", "hello-world"),
        ("  multiple   spaces -- and_underscores ", "multiple-spaces-and-underscores"),
        ("Release 2.0 (final)", "release-2-0-final"),
        ("", ""),
        ("!!!", ""),
    ],
)
def test_ascii(title, slug):
    assert slugify(title) == slug


def test_separator():
    assert slugify("Hello World", separator="_") == "hello_world"


@pytest.mark.parametrize(
    "max_length, slug",
    [(12, "the-quick"), (9, "the-quick"), (3, "the"), (100, "the-quick-brown-fox")],
)
def test_max_length_never_cuts_a_word(max_length, slug):
    assert slugify("The quick brown fox", max_length=max_length) == slug


@pytest.mark.parametrize(
    "title, slug",
    [
        ("Привет, мир!", "привет-мир"),
        ("Йошкар-Ола", "йошкар-ола"),
        ("Київ: їжа та ґанок", "київ-їжа-та-ґанок"),
        ("東京 2020", "東京-2020"),
        ("ガイドブック 第2版", "ガイドブック-第2版"),
    ],
)
def test_other_scripts_are_kept_as_written(title, slug):
    assert slugify(title) == slug
