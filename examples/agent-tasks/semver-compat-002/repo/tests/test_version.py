import pytest

from semverlite import Version, compare, parse


def test_parse_plain():
    assert parse("1.2.3") == Version(1, 2, 3)


def test_parse_prefix_prerelease_and_build():
    assert parse("v1.2.3-rc.1+build.7") == Version(1, 2, 3, ("rc", 1))
    assert str(parse("1.0.0-alpha.beta")) == "1.0.0-alpha.beta"


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "1.2.3.4", "latest"])
def test_parse_rejects(text):
    with pytest.raises(ValueError):
        parse(text)


def test_precedence_chain_from_the_spec():
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.10.0",
        "2.0.0",
    ]
    for lower, higher in zip(chain, chain[1:]):
        assert compare(lower, higher) == -1, (lower, higher)
        assert compare(higher, lower) == 1, (higher, lower)


def test_build_metadata_does_not_affect_precedence():
    assert compare("1.0.0+a", "1.0.0+b") == 0
