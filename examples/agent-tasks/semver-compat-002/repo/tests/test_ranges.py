import pytest

from semverlite import max_satisfying, satisfies


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        ("1.4.2", "^1.2.0", True),
        ("1.2.0", "^1.2.0", True),
        ("2.0.0", "^1.2.0", False),
        ("1.1.9", "^1.2.0", False),
        ("0.2.9", "^0.2.3", True),
        ("0.3.0", "^0.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.4.0", ">=1.0.0 <1.5.0", True),
        ("1.5.0", ">=1.0.0 <1.5.0", False),
        ("1.2.3", "1.2.3", True),
        ("1.2.3", "=1.2.4", False),
        ("3.1.4", "*", True),
    ],
)
def test_satisfies(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_prerelease_opt_in_by_naming_one_in_the_range():
    assert satisfies("1.3.0-beta.2", ">=1.3.0-beta.1")
    assert satisfies("1.3.0-rc.1", ">=1.3.0-beta.1 <1.4.0")
    assert not satisfies("1.3.0-alpha.9", ">=1.3.0-beta.1")


def test_release_satisfies_prerelease_lower_bound():
    assert satisfies("1.3.0", ">=1.3.0-beta.1")


def test_max_satisfying():
    assert max_satisfying(["1.0.0", "1.2.0", "2.1.0"], "^1.0.0") == "1.2.0"
    assert max_satisfying(["v1.0.0", "v1.0.1"], "~1.0.0") == "v1.0.1"


def test_max_satisfying_none():
    assert max_satisfying(["0.9.0", "2.0.0"], "^1.0.0") is None
    assert max_satisfying([], "*") is None
