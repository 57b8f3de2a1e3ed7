"""Parsing and precedence of semantic versions (https://semver.org)."""

import re
from typing import NamedTuple, Tuple, Union

_VERSION = re.compile(
    r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


class Version(NamedTuple):
    major: int
    minor: int
    patch: int
    prerelease: Tuple[Union[int, str], ...] = ()

    def __str__(self):
        core = "%d.%d.%d" % (self.major, self.minor, self.patch)
        if self.prerelease:
            core += "-" + ".".join(str(part) for part in self.prerelease)
        return core


def parse(text):
    """Parse "1.2.3", "v1.2.3-rc.1" or "1.2.3+build.5" into a Version.

    Build metadata is accepted and dropped: it never affects precedence.
    """
    if isinstance(text, Version):
        return text
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ValueError("not a semantic version: %r" % (text,))
    major, minor, patch, pre = match.groups()
    prerelease = ()
    if pre:
        prerelease = tuple(int(part) if part.isdigit() else part for part in pre.split("."))
    return Version(int(major), int(minor), int(patch), prerelease)


def _precedence_key(version):
    # A release sorts after every prerelease of the same major.minor.patch.
    # Within a prerelease, numeric identifiers sort before alphanumeric ones,
    # and a shorter list of identifiers sorts first when it is a prefix.
    if not version.prerelease:
        pre_key = (1,)
    else:
        pre_key = (0,) + tuple(
            (0, part) if isinstance(part, int) else (1, part) for part in version.prerelease
        )
    return (version.major, version.minor, version.patch, pre_key)


def compare(a, b):
    """Return -1, 0 or 1 as version ``a`` has lower, equal or higher precedence than ``b``."""
    key_a = _precedence_key(parse(a))
    key_b = _precedence_key(parse(b))
    return (key_a > key_b) - (key_a < key_b)
