"""Reading a YAML file a person wrote, so that every problem points at the line to edit.

Task bundles and experiment files both go through here: PyYAML parses, pydantic validates, and
pydantic's error locations (``("arms", "baseline", "model", "name")``) are mapped back onto the
lines of the keys they name, using the node tree PyYAML composes from the same text. One mapping
for every file type means a ``file:line: field 'x'`` message reads the same everywhere.

Every document is composed into PyYAML's node tree and checked before a Python object is built
from it (:func:`check_tree`): a key given twice in one mapping is refused with both lines (YAML
would keep the last one silently, so a duplicate arm name replaced the first arm); aliases are
allowed (sharing a model block between arms is a fair use) but the document's size with its
aliases expanded is bounded, and an alias inside its own anchor is refused: a "billion laughs"
file is a few hundred bytes whose nine levels of aliases expand to 10^9 values, and everything
after the parse (validation, line lookup, the identity's JSON) walks that expansion. The bound
is counted over the shared nodes once each, so the check itself is linear in the file.
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
from assay.suites.limits import YAML_MAX_DEPTH, YAML_MAX_INT_CHARS, YAML_MAX_NODES

KeyLines = dict[tuple[str, ...], int]
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SafeLoader(_BaseLoader):
    """PyYAML's safe loader (the C one when PyYAML was built with libyaml, several times
    faster), whose value errors name their line: a 5,000-digit ``seed``, a 13th month in a
    timestamp or ``!!int abc`` raise a plain ``ValueError`` in PyYAML, a traceback without a
    place."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"invalid value: {exc}", node.start_mark) from None
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"


def _compose(text: str, loader: type) -> yaml.Node | None:
    """The single document of ``text`` as a node tree (no Python objects built yet)."""
    composer = loader(text)
    try:
        return composer.get_single_node()
    finally:
        composer.dispose()


def check_tree(path: Path, root: yaml.Node) -> None:
    """Refuse duplicate keys (with both lines), a document larger than ``YAML_MAX_NODES``
    values once its aliases are expanded, deeper than ``YAML_MAX_DEPTH``, holding an alias
    inside its own anchor, or an integer too long to be a setting (a 20,000-bit ``seed``
    parses, then breaks every JSON record it is written into). Each shared node is sized once,
    so a billion-laughs file is refused after a few hundred steps."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    problems: list[Problem] = []

    def line(node: yaml.Node) -> int:
        return node.start_mark.line + 1

    def size(node: yaml.Node, loc: tuple[str, ...], depth: int) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        field = ".".join(loc) or None
        if id(node) in active:
            raise SuiteError.one(path, "an alias refers to the anchor it is inside (a "
                                 "recursive structure): refused", line=line(node), field=field)
        if depth > YAML_MAX_DEPTH:
            raise SuiteError.one(path, f"nested deeper than {YAML_MAX_DEPTH} levels: refused",
                                 line=line(node), field=field)
        if node.tag == _INT_TAG and len(str(node.value)) > YAML_MAX_INT_CHARS:
            problems.append(Problem(path, line(node), field, f"an integer written with "
                                    f"{len(str(node.value)):,} characters: at most "
                                    f"{YAML_MAX_INT_CHARS}"))
        active.add(id(node))
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    first = seen.get((key.tag, key.value))
                    seen.setdefault((key.tag, key.value), line(key))
                    if first is not None:
                        problems.append(Problem(
                            path, line(key), ".".join((*loc, name)),
                            f"duplicate key {key.value!r} (first on line {first}): YAML would "
                            "keep only the last one; rename or remove one"))
                total += size(key, loc, depth + 1) + size(value, (*loc, name), depth + 1)
                if total > YAML_MAX_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                total += size(item, (*loc, str(i)), depth + 1)
                if total > YAML_MAX_NODES:
                    break
        if total > YAML_MAX_NODES:
            raise SuiteError.one(path, f"holds more than {YAML_MAX_NODES:,} values, counting "
                                 "what its YAML aliases expand to (a \"billion laughs\" "
                                 "file?): refused", line=line(node), field=field)
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root, (), 0)
    if problems:
        raise SuiteError(problems)


def key_lines(text: str, *, items: bool = False) -> KeyLines:
    """Line of every mapping key, by its path, so a validation error can point at it. With
    ``items``, sequence items too (by index as a string, as pydantic names them): a problem in
    the third entry of a block list points at that entry, not at the list's key."""
    lines: KeyLines = {}
    try:
        root = _compose(text, SafeLoader)
    except yaml.YAMLError:
        return lines
    seen: set[int] = set()

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if id(node) in seen or len(path) > YAML_MAX_DEPTH:  # an alias: its lines are the anchor's
            return
        seen.add(id(node))
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


def parse_yaml(path: Path, text: str, *, loader: type = SafeLoader) -> Any:
    """``text`` parsed (a safe loader), or a ``SuiteError`` naming the line YAML choked on, a
    key given twice, or aliases that expand past the bound (:func:`check_tree`)."""
    try:
        composer = loader(text)
        try:
            node = composer.get_single_node()
            if node is None:
                return None
            check_tree(path, node)
            return composer.construct_document(node)
        finally:
            composer.dispose()
    except RecursionError:
        raise SuiteError.one(path, "nested too deeply to parse: refused") from None
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
