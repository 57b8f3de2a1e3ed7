"""The reference pages of the files a person writes (task.yaml, experiment.yaml, suite.yaml),
generated from the pydantic models that validate them.

A hand-written list of keys drifts the day a field is added; these pages cannot, because a test
regenerates them and compares. Every key is shown with its type, its default, the values or
bounds it accepts and what it means, then a real example from the repository that the same test
loads. Regenerate with::

    .venv/bin/python -m assay.suites.reference docs/reference
"""

from __future__ import annotations

import functools
import json
import operator
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types as at
from pydantic import BaseModel, Tag
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from assay.suites.bundle import TaskSpec
from assay.suites.cases import SuiteConfig
from assay.suites.experiment import ExperimentSpec
from assay.suites.recipe import Recipe


@dataclass(frozen=True)
class Page:
    """One reference page: the file it documents, its model and an example from the repo."""

    name: str
    title: str
    model: type[BaseModel]
    intro: str
    example: str  # path relative to the repository root


PAGES = (
    Page("task", "`task.yaml`: an agent task bundle", TaskSpec,
         "A task bundle is a folder holding `task.yaml`, the instruction, the starting tree, the "
         "hidden tests and the reference fix. Every path in it is relative to the bundle and "
         "must stay inside it. Unknown keys are refused, with the nearest known key suggested.",
         "examples/agent-tasks/duration-parse-001/task.yaml"),
    Page("experiment", "`experiment.yaml`: an A/B experiment", ExperimentSpec,
         "An experiment runs every selected task × arm × repetition, resumably, and decides "
         "against its `bar`. Paths are relative to the experiment file. Unknown keys are "
         "refused, with the nearest known key suggested.",
         "examples/experiments/rehearsal.yaml"),
    Page("suite", "`suite.yaml`: a narrow suite's settings", SuiteConfig,
         "`suite.yaml` sits beside `data/cases.jsonl` and `prompts/system.txt`; every key is "
         "optional. Unknown keys are refused, with the nearest known key suggested. The "
         "`scorer` key has its own grammar: see docs/guide/narrow.md, Scorers.",
         "examples/extract/suite.yaml"),
    Page("recipe", "Debian recipes (`environment.image: <recipe>.yaml`)", Recipe,
         "A recipe is the source of a task's pinned environment: `assay env build` turns it into "
         "an image (docs/guide/environments.md). A `steps` item is a mapping with exactly one of "
         "the keys `run`, `copy`, `env`, `workdir`, `user`, `pip`, `apt`. Unknown keys are "
         "refused, with the nearest known key suggested.",
         "examples/agent-tasks/leaderboard-rank-007/environment/recipe.yaml"),
)


def _unwrap(annotation: Any) -> list[Any]:
    """The members of a union (without None), or the annotation alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _models_in(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """Nested models a key holds, with the path step that reaches them: ``""`` for the value
    itself, ``.*`` for a list item, ``.<name>`` for a dict value under a name the user picks."""
    found: list[tuple[str, type[BaseModel]]] = []
    for a in _unwrap(annotation):
        origin = typing.get_origin(a)
        if origin is typing.Annotated:  # a tagged union and its members (recipe steps)
            inner, *meta = typing.get_args(a)
            tags = [m.tag for m in meta if isinstance(m, Tag)]
            found += [(s + (f" ({tags[0]})" if tags and not s else ""), m)
                      for s, m in _models_in(inner)]
        elif isinstance(a, type) and issubclass(a, BaseModel):
            found.append(("", a))
        elif origin is list:
            found += [("[]" + s, m) for s, m in _models_in(typing.get_args(a)[0])]
        elif origin is dict:
            found += [(".<name>" + s, m) for s, m in _models_in(typing.get_args(a)[1])]
    return found


def _plain(annotation: Any) -> Any:
    """``annotation`` without its ``Annotated`` wrappers (constraints are shown as "allowed";
    a tagged union's discriminator is no type)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _plain(args[0])
    if origin is list:
        return list[_plain(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict[_plain(args[0]), _plain(args[1])]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_plain(a) for a in args))
    return annotation


def type_name(annotation: Any) -> str:
    """A short, readable spelling of a field's type."""
    if "Annotated" in str(annotation):
        annotation = _plain(annotation)
    if isinstance(annotation, type):
        return annotation.__name__
    text = str(annotation)
    text = re.sub(r"\btyping\.", "", text)
    text = re.sub(r"<class '([\w.]+)'>", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = re.sub(r"\b(?:[a-z_]+\.)+([A-Z]\w*)", r"\1", text)
    text = re.sub(r"^Optional\[(.*)\]$", r"\1 | None", text)
    return text.replace("NoneType", "None")


def _literal_values(annotation: Any) -> list[Any]:
    values: list[Any] = []
    for a in _unwrap(annotation):
        if typing.get_origin(a) is typing.Literal:
            values += list(typing.get_args(a))
        elif typing.get_origin(a) is list:
            values += _literal_values(typing.get_args(a)[0])
    return values


def allowed(info: FieldInfo) -> str:
    """The values or bounds a key accepts, from its type and its constraints."""
    parts: list[str] = []
    literals = _literal_values(info.annotation)
    if literals:
        parts.append(" | ".join(f"`{json.dumps(v)}`" for v in literals))
    for m in info.metadata:
        for cls, attr, sign in ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"),
                                (at.Lt, "lt", "<")):
            if isinstance(m, cls):
                parts.append(f"{sign} {getattr(m, attr)}")
        if isinstance(m, at.MinLen):
            parts.append(f"at least {m.min_length} long")
        if isinstance(m, at.MaxLen):
            parts.append(f"at most {m.max_length} long")
        pattern = getattr(m, "pattern", None)
        if isinstance(pattern, str):
            parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def default(info: FieldInfo) -> str:
    """The default as a user would write it; "required" when there is none."""
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if value is PydanticUndefined:
        return "**required**"
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value, default=str)}`"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "\\|")).strip()


def _sections(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """Every model reachable from ``model``, each once, with the key path that reaches it."""
    seen: set[type[BaseModel]] = set()
    todo: list[tuple[str, type[BaseModel]]] = [(prefix, model)]
    while todo:
        path, cls = todo.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        yield path, cls
        for name, info in cls.model_fields.items():
            key = info.alias or name
            for step, sub in _models_in(info.annotation):
                todo.append((f"{path}.{key}{step}" if path else f"{key}{step}", sub))


def render(page: Page, root: Path) -> str:
    """The Markdown of one reference page."""
    out = [f"# {page.title}", "",
           "Generated from the models in `src/assay/suites/` by "
           "`python -m assay.suites.reference docs/reference`; a test keeps it current.", "",
           page.intro, ""]
    for path, cls in _sections(page.model, ""):
        out += [f"## `{path}`" if path else "## Top level", ""]
        doc = " ".join((cls.__doc__ or "").split())
        if doc and not doc.startswith(cls.__name__ + "("):
            out += [doc, ""]
        out += ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
        for name, info in cls.model_fields.items():
            key = info.alias or name
            out.append(f"| `{key}` | `{_cell(type_name(info.annotation))}` | {default(info)} | "
                       f"{_cell(allowed(info))} | {_cell(info.description or '')} |")
        out.append("")
    example = (root / page.example).read_text(encoding="utf-8")
    out += ["## Example", "", f"`{page.example}`:", "", "```yaml", example.rstrip(), "```", ""]
    return "\n".join(out)


def write_all(out_dir: Path, root: Path) -> list[Path]:
    """Every page under ``out_dir`` (``<name>.md``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for page in PAGES:
        target = out_dir / f"{page.name}.md"
        target.write_text(render(page, root), encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    repo = Path(__file__).resolve().parents[3]
    for p in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference"), repo):
        print(p)
