"""Reading a YAML file a person wrote, so that every problem points at the line to edit.

Task bundles and experiment files both go through here: PyYAML parses, pydantic validates, and
pydantic's error locations (``("arms", "baseline", "model", "name")``) are mapped back onto the
lines of the keys they name, using the node tree PyYAML composes from the same text. One mapping
for every file type means a ``file:line: field 'x'`` message reads the same everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from assay.suites.errors import Problem, SuiteError

KeyLines = dict[tuple[str, ...], int]


def key_lines(text: str, *, items: bool = False) -> KeyLines:
    """Line of every mapping key, by its path, so a validation error can point at it. With
    ``items``, sequence items too (by index as a string, as pydantic names them): a problem in
    the third entry of a block list points at that entry, not at the list's key."""
    lines: KeyLines = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, str(k.value))
                lines[p] = k.start_mark.line + 1
                walk(v, p)
        elif items and isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                p = (*path, str(i))
                lines[p] = v.start_mark.line + 1
                walk(v, p)

    if root is not None:
        walk(root, ())
    return lines


def line_of(lines: KeyLines, loc: tuple[str, ...]) -> int | None:
    """The line of ``loc``, or of its nearest ancestor the file spells out (a missing field
    points at the mapping that lacks it)."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def parse_yaml(path: Path, text: str) -> Any:
    """``text`` parsed (safe loader), or a ``SuiteError`` naming the line YAML choked on."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SuiteError.one(path, f"invalid YAML: {getattr(exc, 'problem', exc)}",
                             line=mark.line + 1 if mark else None) from exc


def load_mapping(path: Path, text: str) -> dict[str, Any]:
    """The top-level mapping of ``text``, or a ``SuiteError`` naming the line YAML choked on."""
    data = parse_yaml(path, text)
    if not isinstance(data, dict):
        raise SuiteError.one(path, "expected a mapping at the top level")
    return data


def validation_error(path: Path, text: str, exc: ValidationError, *,
                     items: bool = False) -> SuiteError:
    """Every pydantic problem of ``exc`` as a ``Problem`` with its line and dotted field."""
    lines = key_lines(text, items=items)
    problems = []
    for e in exc.errors():
        loc = tuple(str(x) for x in e["loc"])
        problems.append(Problem(path, line_of(lines, loc), ".".join(loc) or None, e["msg"]))
    return SuiteError(problems)
