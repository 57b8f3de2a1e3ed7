"""Path patterns of a task bundle (``protected_paths``, ``allowed_paths``,
``allowed_binaries``): one reading of a glob, shared by the verifier, the agents and the
mutants, so that what a task protects means the same thing everywhere."""

from __future__ import annotations

from fnmatch import fnmatchcase


def glob_match(path: str, pattern: str) -> bool:
    """Glob where ``**`` spans directories and ``dir/**`` also names ``dir`` itself."""
    pattern = pattern.strip("/")
    if pattern.endswith("/**") and path == pattern[:-3]:
        return True
    if fnmatchcase(path, pattern):
        return True
    # fnmatch's "*" already crosses "/", so "a/**/b" should also match "a/b"
    return "/**/" in pattern and fnmatchcase(path, pattern.replace("/**/", "/"))


def matches_any(path: str, patterns: list[str]) -> bool:
    return any(glob_match(path, p) for p in patterns)
