"""Hidden behaviour tests for semver-compat-002."""

from semverlite import max_satisfying, satisfies


def test_rc_of_next_major_is_outside_caret_range():
    assert satisfies("2.0.0-rc.1", "^1.2.0") is False


def test_prerelease_of_minor_is_outside_caret_range():
    assert satisfies("1.5.0-beta.3", "^1.2.0") is False


def test_max_satisfying_skips_prereleases():
    assert max_satisfying(["1.4.2", "1.5.0-beta.3", "2.0.0-rc.1"], "^1.2.0") == "1.4.2"


def test_star_does_not_match_prerelease():
    assert satisfies("1.0.0-rc.1", "*") is False


def test_opt_in_applies_only_to_the_same_major_minor_patch():
    assert satisfies("1.4.0-alpha", ">=1.3.0-beta.1") is False


def test_max_satisfying_with_opt_in_stays_on_the_named_patch():
    tags = ["1.3.0-beta.1", "1.3.0-beta.4", "1.4.0-alpha.1"]
    assert max_satisfying(tags, ">=1.3.0-beta.1 <1.5.0") == "1.3.0-beta.4"
