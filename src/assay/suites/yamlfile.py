"""Reading a YAML file a person wrote, so that every problem points at the line to edit.

Task bundles and experiment files both go through here: PyYAML parses, pydantic validates, and
pydantic's error locations (``("arms", "baseline", "model", "name")``) are mapped back onto the
lines of the keys they name, using the node tree PyYAML composes from the same text. One mapping
for every file type means a ``file:line: field 'x'`` message reads the same everywhere.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

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


def _model_at(model: Any, loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at ``loc`` below ``model``, following
    fields, list items and dict values; None where the path leaves the models."""
    node: Any = model
    parts = list(loc)
    while True:
        origin = typing.get_origin(node)
        if origin in (typing.Union, types.UnionType, typing.Annotated):
            inner = [a for a in typing.get_args(node) if a is not type(None)]
            if origin is typing.Annotated:
                inner = inner[:1]
            models = [a for a in inner if _model_at(a, ()) is not None or
                      typing.get_origin(a) in (list, dict)]
            if len(models) != 1:
                return None
            node = models[0]
            continue
        if not parts:
            return node if isinstance(node, type) and issubclass(node, BaseModel) else None
        part = parts.pop(0)
        if origin is list:
            node = typing.get_args(node)[0]
        elif origin is dict:
            node = typing.get_args(node)[1]
        elif isinstance(node, type) and issubclass(node, BaseModel):
            fields = {(f.alias or n): f for n, f in node.model_fields.items()}
            fields.update(node.model_fields)
            if part not in fields:
                return None
            node = fields[part].annotation
        else:
            return None


def unknown_key_message(model: Any, loc: tuple[str, ...]) -> str | None:
    """"unknown key" with the nearest known key (a typo is the usual cause) or the keys that
    are allowed there; None when the models do not say what is allowed at ``loc``."""
    if not loc:
        return None
    parent = _model_at(model, loc[:-1])
    if parent is None:
        return None
    known = sorted({f.alias or n for n, f in parent.model_fields.items()})
    near = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    if near:
        return f"unknown key {loc[-1]!r}: did you mean {near[0]!r}?"
    return f"unknown key {loc[-1]!r} (allowed here: {', '.join(known)})"


def validation_error(path: Path, text: str, exc: ValidationError, *,
                     items: bool = False, model: Any = None) -> SuiteError:
    """Every pydantic problem of ``exc`` as a ``Problem`` with its line and dotted field. Given
    the ``model`` that was validated, an unknown key names the nearest known one."""
    lines = key_lines(text, items=items)
    problems = []
    for e in exc.errors():
        loc = tuple(str(x) for x in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden" and model is not None:
            msg = unknown_key_message(model, loc) or msg
        elif e["type"] == "missing":
            msg = "required key missing"
        problems.append(Problem(path, line_of(lines, loc), ".".join(loc) or None, msg))
    return SuiteError(problems)
