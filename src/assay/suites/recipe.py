"""Debian recipes: the source of a pinned environment a task author writes (or a Dockerfile
becomes).

A recipe names a Debian suite, the packages ``mmdebstrap`` installs from Debian's archive, the
Python requirements pip installs into the image, and then ordered steps (shell lines run inside
the image being built, files copied from the recipe's folder, environment, working directory,
user). Its digest (:func:`recipe_digest`: the validated recipe plus the bytes of every file it
copies) names the build; the image store maps it to the image digest that pins the result.

Only the data lives here (suites are inputs, parsed and bounded like every other input); the
build is ``assay.environments``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    field_validator,
    model_serializer,
)

RECIPE_SCHEMA = "assay.recipe/1"
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

#: Debian package names (policy 5.6.1) with an optional ``=version``.
_PACKAGE = r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class RunStep(_Strict):
    """A shell line run with ``/bin/sh -c`` inside the image being built, as root of its own
    user namespace, with network to the package registries only."""

    run: str = Field(min_length=1, max_length=64_000)
    """The shell text (heredoc bodies included)."""


class CopySpec(_Strict):
    src: str = Field(min_length=1)
    """A path relative to the recipe's folder (the build context); never outside it."""
    dest: str = Field(min_length=1)
    """Where it goes in the image: absolute, or relative to the working directory."""
    mode: str | None = Field(default=None, pattern=r"^0?[0-7]{3,4}$")
    """Permission bits to set (``COPY --chmod``); null keeps the source's."""


class CopyStep(_Strict):
    """Files from the recipe's folder into the image."""

    copy_: CopySpec = Field(alias="copy")
    """What to copy where."""


class EnvStep(_Strict):
    """Environment variables for the later steps and for every process in the image."""

    env: dict[str, str]
    """Names and values; a later step or ``env`` entry with the same name wins."""


class WorkdirStep(_Strict):
    """The working directory of the later steps and of the image (created if missing)."""

    workdir: str = Field(min_length=1)
    """Absolute, or relative to the working directory so far."""


class UserStep(_Strict):
    """The user the image names (recorded; the sandbox runs as its own uid)."""

    user: str = Field(min_length=1)
    """A user name or uid, as a Dockerfile's ``USER`` names it."""


class PipStep(_Strict):
    """Python requirements installed at this point (``python3 -m pip install``)."""

    pip: list[str] = Field(min_length=1)
    """Requirements as pip reads them on its command line (``name==1.2``, ``other>=3``)."""


class AptStep(_Strict):
    """Debian packages installed at this point (``apt-get install``)."""

    apt: list[Annotated[str, Field(pattern=_PACKAGE)]] = Field(min_length=1)
    """Debian package names, each optionally ``=version``: one package per entry."""
    recommends: bool = False
    """Install the packages' Recommends too (apt's own default, and a Dockerfile's
    ``apt-get install`` without ``--no-install-recommends``). Off unless asked for: a recipe
    names what it needs, and every Recommends is more to download, more to pin and more that
    can differ between suites."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``recommends`` only when true, so the digest of a recipe written before the field
        existed (and of any recipe that leaves it off) is what it was."""
        data: dict[str, Any] = handler(self)
        if not self.recommends:
            data.pop("recommends", None)
        return data


#: Which step a mapping is, by the one key that names its kind.
STEP_KINDS = ("run", "copy", "env", "workdir", "user", "pip", "apt")


def _step_kind(value: Any) -> str | None:
    """The kind of a step: the first of :data:`STEP_KINDS` among its keys (a model instance
    answers by its class), so a bad step gets the errors of the kind it meant to be instead of
    one error per kind it might have been."""
    if isinstance(value, BaseModel):
        return _STEP_TAGS.get(type(value))
    if isinstance(value, dict):
        return next((k for k in STEP_KINDS if k in value), None)
    return None


Step = Annotated[
    Annotated[RunStep, Tag("run")] | Annotated[CopyStep, Tag("copy")]
    | Annotated[EnvStep, Tag("env")] | Annotated[WorkdirStep, Tag("workdir")]
    | Annotated[UserStep, Tag("user")] | Annotated[PipStep, Tag("pip")]
    | Annotated[AptStep, Tag("apt")],
    Discriminator(_step_kind, custom_error_type="step_kind",
                  custom_error_message="a step is a mapping with one of the keys "
                  + ", ".join(STEP_KINDS),
                  custom_error_context={"kinds": ", ".join(STEP_KINDS)}),
]
_STEP_TAGS: dict[type, str] = {RunStep: "run", CopyStep: "copy", EnvStep: "env",
                               WorkdirStep: "workdir", UserStep: "user", PipStep: "pip",
                               AptStep: "apt"}


class Recipe(_Strict):
    """A Debian recipe: ``mmdebstrap`` of ``suite`` with ``packages``, then ``pip``, then
    ``steps`` in order."""

    suite: str = Field(default=DEFAULT_SUITE, pattern=r"^[a-z][a-z0-9-]*$")
    """The Debian suite (``bookworm``, ``trixie``, ``stable``...)."""
    mirror: str = Field(default=DEFAULT_MIRROR, pattern=r"^https?://[^\s]+$")
    """The Debian archive to build from."""
    packages: list[Annotated[str, Field(pattern=_PACKAGE)]] = Field(default_factory=list)
    """Debian packages installed by ``mmdebstrap`` (``python3`` is added when ``pip`` or a
    ``python`` version asks for it)."""
    python: str | None = Field(default=None, pattern=r"^3\.[0-9]{1,2}$")
    """The Python version the source asked for (``FROM python:3.12-slim``); when the suite's
    ``python3`` differs, the build says so in ``substitutions``."""
    pip: list[str] = Field(default_factory=list)
    """Python requirements installed into the image after the packages."""
    steps: list[Step] = Field(default_factory=list)
    """Ordered steps after the packages and ``pip``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of every process in the image (later ``env`` steps add to it)."""
    workdir: str = "/work"
    """The image's working directory: where a task's workspace is mounted."""
    user: str = "root"
    """The user the image names."""
    substitutions: list[str] = Field(default_factory=list)
    """What the source asked for that this recipe approximates (filled by the Dockerfile
    translation: ``FROM ubuntu:22.04 -> Debian bookworm``), recorded with the image."""

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v


def copied_sources(recipe: Recipe) -> list[str]:
    """The context paths the recipe copies, in order."""
    return [s.copy_.src for s in recipe.steps if isinstance(s, CopyStep)]


def recipe_digest(recipe: Recipe, context: Path | None) -> str:
    """``sha256:`` over the recipe's canonical JSON and the bytes of every file it copies
    (walked in sorted order below each copied path), so an edited context file is a new build.
    The caller confines the copied paths to ``context`` before calling this."""
    h = hashlib.sha256()
    h.update(RECIPE_SCHEMA.encode())
    h.update(json.dumps(recipe.model_dump(mode="json", by_alias=True), sort_keys=True,
                        separators=(",", ":")).encode())
    for src in copied_sources(recipe):
        base = (context or Path(".")) / src
        paths = [base] if not base.is_dir() else sorted(p for p in base.rglob("*"))
        for p in paths:
            rel = str(p.relative_to(context)) if context else str(p)
            if p.is_symlink():
                h.update(f"\0l {rel} {p.readlink()}".encode())
            elif p.is_file():
                h.update(f"\0f {rel} {p.stat().st_mode & 0o777:o} ".encode())
                h.update(hashlib.sha256(p.read_bytes()).digest())
            elif p.is_dir():
                h.update(f"\0d {rel}".encode())
    return "sha256:" + h.hexdigest()


def _field(loc: tuple[str, ...]) -> tuple[str, ...]:
    """A pydantic location without the tag a tagged union inserts (``steps.2.run.run`` is the
    ``run`` key of the third step: ``steps.2.run``)."""
    if len(loc) >= 3 and loc[0] == "steps" and loc[2] in STEP_KINDS:
        return (*loc[:2], *loc[3:])
    return loc


_PATTERN_MESSAGES = {
    "package": "not a Debian package name (lowercase letters, digits, '+', '-', '.'; "
               "optionally '=version'): one package per entry",
    "mirror": "must be an http:// or https:// URL of a Debian archive",
    "suite": "not a Debian suite name (bookworm, trixie, stable...)",
    "python": "a Python version is written '3.X' (quoted, so YAML keeps it a string)",
    "mode": "permission bits are written in octal, e.g. '0755'",
}


def _pattern_kind(loc: tuple[str, ...]) -> str:
    """Which pattern a location's value missed: ``packages.3`` and ``steps.1.apt.0`` are
    packages, the rest are named by their last key."""
    if loc[:1] == ("packages",) or (len(loc) >= 3 and loc[2] == "apt"):
        return "package"
    return loc[-1] if loc else ""


def _unknown_key(raw: tuple[str, ...], loc: tuple[str, ...]) -> str | None:
    """The unknown-key message, naming the keys of the step kind when the key is in a step."""
    from assay.suites.yamlfile import unknown_key_message

    if raw != loc:
        model = {v: k for k, v in _STEP_TAGS.items()}[raw[2]]
        return unknown_key_message(model, loc[2:])
    return unknown_key_message(Recipe, loc)


def load_recipe(path: Path) -> tuple[Recipe, Path]:
    """A recipe file (``env.yaml``, any name) and its folder, the build context that ``copy``
    steps read from. Bounded (:data:`RECIPE_FILE_MAX_BYTES`), parsed and validated with every
    problem at its ``file:line: field``; every copied path must stay inside the folder (after
    symbolic links, and no link below a copied folder may lead out)."""
    from pydantic import ValidationError

    from assay.suites.confine import links_out, path_problem
    from assay.suites.errors import Problem, SuiteError
    from assay.suites.limits import RECIPE_FILE_MAX_BYTES
    from assay.suites.textfile import read_text
    from assay.suites.yamlfile import key_lines, line_of, load_mapping

    _, text = read_text(path, limit=RECIPE_FILE_MAX_BYTES, what="the recipe file")
    data = load_mapping(path, text)
    lines = key_lines(text, items=True)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            raw = tuple(str(x) for x in e["loc"])
            loc = _field(raw)
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = _unknown_key(raw, loc) or msg
            elif e["type"] == "missing":
                msg = "required key missing"
            elif e["type"] == "string_type" and loc == ("python",):
                msg = ("write the version quoted, e.g. python: \"3.12\" (unquoted, YAML "
                       "reads it as a number: 3.10 becomes 3.1)")
            elif e["type"] == "string_pattern_mismatch":
                msg = _PATTERN_MESSAGES.get(_pattern_kind(loc), msg)
            problems.append(Problem(path, line_of(lines, loc), ".".join(loc) or None, msg))
        raise SuiteError(problems) from None
    context = path.parent
    problems = []
    for i, step in enumerate(recipe.steps):
        if not isinstance(step, CopyStep):
            continue
        loc = ("steps", str(i), "copy", "src")
        line = line_of(lines, loc)
        field = ".".join(loc)
        bad = path_problem(context, step.copy_.src, at=path, line=line, field=field)
        if bad is not None:
            problems.append(bad)
            continue
        source = context / step.copy_.src
        if not source.exists() and not source.is_symlink():
            problems.append(Problem(path, line, field, f"{step.copy_.src!r} does not exist in "
                                    f"the recipe's folder {context}"))
        elif source.is_dir():
            problems += links_out(context, source, at=path, line=line, field=field)
    if problems:
        raise SuiteError(problems)
    return recipe, context


def step_lines(path: Path) -> dict[int, int]:
    """The line of each step of a recipe file (index -> line), so a step that fails during the
    build is reported where it is written."""
    from assay.suites.limits import RECIPE_FILE_MAX_BYTES
    from assay.suites.textfile import read_text
    from assay.suites.yamlfile import key_lines

    _, text = read_text(path, limit=RECIPE_FILE_MAX_BYTES, what="the recipe file")
    lines = key_lines(text, items=True)
    return {int(loc[1]): line for loc, line in lines.items()
            if len(loc) == 2 and loc[0] == "steps" and loc[1].isdigit()}
