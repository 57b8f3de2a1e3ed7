"""Canary tests: the verifier's proof that the test runner can still fail.

The candidate's code is imported by the test process and can rewrite what the runner reports
(every test body a no-op, every failed report turned "passed"). No report the process writes can
be believed for what it says; it can be believed when it also says that a test the verifier
planted, which must fail, failed. Two kinds are planted before each tamper-evident check:

``random``   a pair in every test file of its private copy: one that must pass, one that must
             fail, of a fixed shape (``value = N`` / ``assert value == M``) with names and values
             drawn per run, placed at random among the file's own top-level statements. Cheap and
             universal (node's runner too), but recognisable by their shape, so the verdict never
             rests on them alone where derived ones can be made;
``derived``  copies of the file's own test functions with one assertion changed so that the copy
             and the original cannot both pass (``canary_derive.py``): indistinguishable from the
             real tests, validated to fail with the reference solution, drawn afresh per
             verification from a recorded seed.
"""

from __future__ import annotations

import ast
import posixpath
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: ``ast.parse`` is not safe in two threads at once on CPython 3.11 before 3.11.8 (its AST
#: conversion keeps one recursion counter per interpreter: "SystemError: AST constructor
#: recursion depth mismatch"), and the verifier plants canaries in several verifications at a
#: time (``--verify-jobs``). Every parse of the verifier goes through :func:`parse_python`.
_PARSE_LOCK = threading.Lock()


def parse_python(text: str) -> ast.Module:
    """``ast.parse(text)``, one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(text)

#: Where the hidden tests are mounted in a check's sandbox (so ids of planted files can be told
#: apart: ``tests/<rel>`` is there, ``work/<rel>`` in the workspace).
TESTS_MOUNT = "/assay/tests"

_WORDS = ("parse", "format", "roundtrip", "handles", "rejects", "keeps", "empty", "unicode",
          "large", "nested", "order", "default", "limits", "repeat", "mixed", "edge")


def is_test_file(path: str) -> bool:
    """pytest's default ``python_files``: ``test_*.py`` and ``*_test.py``."""
    base = posixpath.basename(path)
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))


_JS_SUFFIXES = (".js", ".cjs", ".mjs")


def is_js_test_file(path: str) -> bool:
    """node's default ``--test`` patterns: ``*.test.js``, ``*-test.js``, ``*_test.js``,
    ``test-*.js``, ``test.js`` (and ``.cjs`` / ``.mjs``), or any of those under ``test/``;
    ``*.spec.js`` too, since teams name them so."""
    base = posixpath.basename(path)
    if not base.endswith(_JS_SUFFIXES):
        return False
    stem = base.rsplit(".", 1)[0]
    return (stem == "test" or stem.startswith("test-") or stem.endswith(
        (".test", "-test", "_test", ".spec")) or "test" in path.split("/")[:-1])


#: ``random``: a planted test of a random shape; ``derived``: a copy of one of the task's own
#: tests with one assertion changed (``canary_derive.py``).
CanaryKind = Literal["random", "derived"]


@dataclass(frozen=True)
class Canary:
    """One planted test: its function name, the file it went into (relative to the root it was
    planted under, with that root's label), and what it must report."""

    name: str
    file: str
    must: Literal["pass", "fail"]
    kind: CanaryKind = "random"
    #: a derived canary's original test function, and what of it was changed
    origin: str | None = None
    change: str | None = None
    #: pytest id suffixes ("" or "[param]") of the items that must fail: a derived copy of a
    #: parametrized test is several items, those that failed with the reference solution
    items: tuple[str, ...] = ("",)

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"name": self.name, "file": self.file, "must": self.must,
                               "kind": self.kind}
        if self.kind == "derived":
            rec.update({"origin": self.origin, "change": self.change, "items": list(self.items)})
        return rec


def _name(rng: secrets.SystemRandom) -> str:
    words = rng.sample(_WORDS, 2)
    return f"test_{words[0]}_{words[1]}_{secrets.token_hex(4)}"


def _body(name: str, must: str, rng: secrets.SystemRandom) -> str:
    a = rng.randrange(10_000, 99_999)
    b = a if must == "pass" else a + rng.randrange(1, 999)
    return f"\n\ndef {name}():\n    value = {a}\n    assert value == {b}\n\n"


def _js_body(name: str, must: str, rng: secrets.SystemRandom, esm: bool) -> str:
    a = rng.randrange(10_000, 99_999)
    b = a if must == "pass" else a + rng.randrange(1, 999)
    fn = f"t{secrets.token_hex(3)}"
    # node:assert, as the task's own tests use it: an attack on the assertions fails the
    # must-fail canary too
    check = f"() => {{ const value = {a}; {fn}a.strictEqual(value, {b}); }}"
    if esm:
        return (f"\nimport {{ test as {fn} }} from 'node:test';\nimport {fn}a from 'node:assert';"
                f"\n{fn}({name!r}, {check});\n")
    return (f"\nconst {fn}a = require('node:assert');\n"
            f"require('node:test')({name!r}, {check});\n")


def _is_esm(path: Path, text: str) -> bool:
    if path.suffix == ".mjs":
        return True
    if path.suffix == ".cjs":
        return False
    return any(line.startswith(("import ", "export ")) for line in text.splitlines())


def _insert_points(text: str) -> list[int]:
    """Line indexes (0-based) where a top-level statement after the imports starts, plus the
    end of the file: places where a new function can go without splitting anything."""
    lines = text.splitlines(keepends=True)
    try:
        tree = parse_python(text)
    except SyntaxError:
        return [len(lines)]
    body = tree.body
    last_import = max((i for i, n in enumerate(body)
                       if isinstance(n, ast.Import | ast.ImportFrom)), default=-1)
    points = []
    for node in body[last_import + 1:]:
        start = node.lineno - 1
        decorators = getattr(node, "decorator_list", [])
        if decorators:
            start = min(start, *(d.lineno - 1 for d in decorators))
        points.append(max(start, 0))
    points.append(len(lines))
    return points


def plant(root: Path, label: str, files: list[str]) -> list[Canary]:
    """Write a must-pass and a must-fail canary into each of ``files`` (paths relative to
    ``root``) and return them. Files that are not plain readable text are left alone."""
    rng = secrets.SystemRandom()
    planted: list[Canary] = []
    for rel in files:
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text and not text.endswith("\n"):
            text += "\n"
        pair = [Canary(_name(rng), f"{label}/{rel}", "pass"),
                Canary(_name(rng), f"{label}/{rel}", "fail")]
        if path.suffix in _JS_SUFFIXES:
            # No JavaScript parser here: the pair goes at the end, among the file's own tests.
            esm = _is_esm(path, text)
            text += "".join(_js_body(c.name, c.must, rng, esm) for c in rng.sample(pair, 2))
            path.write_text(text, encoding="utf-8")
            planted += pair
            continue
        lines = text.splitlines(keepends=True)
        points = _insert_points(text)
        # Insert from the bottom up so earlier line indexes stay valid.
        chosen = sorted(((rng.choice(points), c) for c in pair), key=lambda t: -t[0])
        for at, canary in chosen:
            lines.insert(at, _body(canary.name, canary.must, rng))
        path.write_text("".join(lines), encoding="utf-8")
        planted += pair
    return planted


def id_in_file(nodeid: str, planted_file: str) -> bool:
    """Whether a pytest node id belongs to the planted file ``tests/<rel>`` (hidden tests) or
    ``work/<rel>`` (the workspace's own)."""
    label, _, rel = planted_file.partition("/")
    path = nodeid.split("::", 1)[0]
    mount = TESTS_MOUNT.strip("/") + "/"
    if label == "tests":  # relative to pytest's rootdir, which may be the mount itself
        return path == rel or path.endswith(mount + rel)
    return (path == rel or path.endswith("/" + rel)) and mount not in path
