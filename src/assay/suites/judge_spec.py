"""A judge, as a person writes it down: ``judge.yaml`` plus a rubric file, pinned by content.

A model's verdict is only evidence if a reader can tell exactly which judge gave it, so a judge
is loaded into a :class:`LoadedJudge` whose **revision** is a hash over everything that can
change a verdict: the model name as asked, the rubric's bytes, the prompt template's bytes, the
temperature, the token limit and the reply contract. A changed rubric or model is therefore a
new revision, whose judgements sit beside the old ones instead of replacing them.

``judge.yaml``::

    model: gpt-4o-mini            # as asked of the endpoint (the served name is recorded per call)
    base_url: http://localhost:8000/v1   # or base_url_env: JUDGE_BASE_URL
    api_key_env: OPENAI_API_KEY   # the variable holding the key (the key is never recorded)
    rubric: rubric.yaml           # relative to judge.yaml
    template: null                # optional prompt template; else the built-in one
    temperature: 0
    max_tokens: 1024

The rubric file is a YAML list of criteria; a scale is a list of two integers (an inclusive
range) or a list of labels::

    - id: correct
      question: Does the answer solve the task as asked?
      scale: [0, 3]
    - id: tone
      question: Is the answer polite?
      scale: [polite, rude]

The built-in template lives in ``suites/templates/judge.txt`` (with the suite, like the other
fixed prompts in ``suites/prompts.py``: it is part of what is pinned). A custom template must
contain every placeholder of :data:`PLACEHOLDERS` and no other ``{{name}}``.

The three files are read bounded (``suites/limits.py``: 256 KiB for ``judge.yaml`` and the
template, 1 MiB for the rubric) because a judge file can come with a bundle or an experiment
from anyone; a bundle's judge is also confined to the bundle (``confine``), like every other
path of its ``task.yaml``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from assay.suites.errors import Problem, SuiteError
from assay.suites.limits import (
    JUDGE_FILE_MAX_BYTES,
    MAX_SCALE_SPAN,
    RUBRIC_FILE_MAX_BYTES,
    TEMPLATE_FILE_MAX_BYTES,
)
from assay.suites.textfile import read_text
from assay.suites.yamlfile import (
    SafeLoader,
    key_lines,
    line_of,
    load_mapping,
    parse_yaml,
    validation_error,
)

#: The reply contract a judge's answer is parsed by; part of every revision.
CONTRACT = "assay.judge.reply/1"
BUILTIN_TEMPLATE = Path(__file__).resolve().parent / "templates" / "judge.txt"
#: The placeholders a prompt template must contain: the two delimiter lines of this call, the
#: rendered rubric and the reply's JSON shape.
PLACEHOLDERS = ("begin", "end", "criteria", "reply_format")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True,
                              allow_inf_nan=False)


class Criterion(_Strict):
    """One line of the rubric: a question and the scores allowed as its answer."""

    id: str = Field(pattern=ID_PATTERN)
    """The criterion's name, the key of its score in every judgement."""
    question: str = Field(min_length=1)
    """What the judge answers for this criterion."""
    scale: list[str] | tuple[int, int]
    """Allowed scores: two integers ``[lo, hi]`` (every integer between, inclusive), or a list
    of labels."""

    @field_validator("scale", mode="before")
    @classmethod
    def _scale_shape(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple) or len(value) < 2:
            raise ValueError("a scale is [lo, hi] (two integers) or a list of at least two "
                             "labels")
        if all(type(v) is int for v in value):
            if len(value) != 2 or value[0] >= value[1]:
                raise ValueError("an integer scale is [lo, hi] with lo < hi")
            if value[1] - value[0] > MAX_SCALE_SPAN:
                raise ValueError(f"an integer scale spans at most {MAX_SCALE_SPAN} steps (every "
                                 "score of it is listed in a calibration table)")
            return (value[0], value[1])
        if all(isinstance(v, str) for v in value):
            labels = [v.strip() for v in value]
            if any(not v for v in labels):
                raise ValueError("a label may not be empty")
            if len({v.lower() for v in labels}) != len(labels):
                raise ValueError("labels must differ (ignoring case)")
            return labels
        raise ValueError("a scale is all integers ([lo, hi]) or all labels, not a mix")

    @property
    def is_range(self) -> bool:
        return isinstance(self.scale, tuple)

    def allowed(self) -> list[str | int]:
        """Every allowed score, in scale order (the order of a confusion table)."""
        if isinstance(self.scale, tuple):
            return list(range(self.scale[0], self.scale[1] + 1))
        return list(self.scale)

    def normalise(self, value: object) -> str | int | None:
        """``value`` as the score it names, or None when the scale does not allow it. Labels
        match ignoring case and surrounding space; an integer scale takes only integers."""
        if isinstance(self.scale, tuple):
            if type(value) is int and self.scale[0] <= value <= self.scale[1]:
                return value
            return None
        if isinstance(value, str):
            wanted = value.strip().lower()
            for label in self.scale:
                if label.lower() == wanted:
                    return label
        return None

    def describe_scale(self) -> str:
        if isinstance(self.scale, tuple):
            return f"an integer from {self.scale[0]} to {self.scale[1]}"
        return "one of " + ", ".join(json.dumps(v) for v in self.scale)


class JudgeSpec(_Strict):
    """``judge.yaml``: which model judges, with which rubric, under which settings."""

    model: str = Field(min_length=1)
    """The model name as asked of the endpoint."""
    base_url: str | None = None
    """The endpoint's base URL (OpenAI-compatible, ending in ``/v1``)."""
    base_url_env: str | None = None
    """Or: the environment variable holding the base URL."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key; the key itself is never recorded."""
    rubric: str = Field(min_length=1)
    """The rubric file, relative to ``judge.yaml``."""
    template: str | None = None
    """A prompt template file, relative to ``judge.yaml``; the built-in one when not given."""
    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature (0 unless there is a reason; recorded either way)."""
    max_tokens: int = Field(default=1024, ge=1)
    """The reply's token limit."""


@dataclass(frozen=True)
class LoadedJudge:
    """A judge ready to ask: its spec, its criteria and the hashes that pin it."""

    spec: JudgeSpec
    path: Path
    criteria: tuple[Criterion, ...]
    rubric_sha256: str
    template_sha256: str
    contract: str
    revision: str
    template_text: str

    def criterion(self, cid: str) -> Criterion | None:
        return next((c for c in self.criteria if c.id == cid), None)

    def pin(self) -> dict[str, Any]:
        """What pins this judge, for every judgement record and every manifest that uses it
        (the base URL without credentials; the API key never)."""
        s = self.spec
        return {"revision": self.revision, "model": s.model, "rubric": s.rubric,
                "rubric_sha256": self.rubric_sha256,
                "template": s.template or "builtin", "template_sha256": self.template_sha256,
                "temperature": s.temperature, "max_tokens": s.max_tokens,
                "contract": self.contract,
                "base_url": _redact(s.base_url) if s.base_url else None,
                "base_url_env": s.base_url_env}


def _redact(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def revision_of(model: str, rubric_sha256: str, template_sha256: str, temperature: float,
                max_tokens: int, contract: str = CONTRACT) -> str:
    """12 hex of a sha256 over everything that can change a verdict."""
    ident = json.dumps({"model": model, "rubric_sha256": rubric_sha256,
                        "template_sha256": template_sha256, "temperature": float(temperature),
                        "max_tokens": max_tokens, "contract": contract}, sort_keys=True)
    return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:12]


def _read(path: Path, *, what: str, at: Path, line: int | None, field: str, limit: int,
          confine: Path | None) -> tuple[bytes, str]:
    if confine is not None and not _inside(path, confine):
        raise SuiteError.one(at, f"{what} {path} leads outside {confine} (through '..', an "
                             "absolute path or a symbolic link): refused", line=line,
                             field=field)
    return read_text(path, limit=limit, what=what, at=at, line=line, field=field)


def _inside(path: Path, folder: Path) -> bool:
    """``path`` resolves inside ``folder`` after symbolic links (a link loop does not)."""
    from assay.suites.confine import real

    target, top = real(path), real(folder)
    return target is not None and top is not None and target.is_relative_to(top)


class _RubricLoader(SafeLoader):
    """YAML without its booleans: a scale ``[yes, no]`` means the labels "yes" and "no"."""


_RubricLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def load_criteria(path: Path, text: str) -> tuple[Criterion, ...]:
    """The rubric file's criteria; every problem with its line and field."""
    data = parse_yaml(path, text, loader=_RubricLoader)
    if not isinstance(data, list) or not data:
        raise SuiteError.one(path, "a rubric file is a YAML list of criteria (id, question, "
                             "scale)")
    try:
        criteria = TypeAdapter(list[Criterion]).validate_python(data)
    except ValidationError as exc:
        raise validation_error(path, text, exc, items=True, model=list[Criterion]) from exc
    lines = key_lines(text, items=True)
    seen: set[str] = set()
    problems = []
    for i, c in enumerate(criteria):
        if c.id in seen:
            problems.append(Problem(path, line_of(lines, (str(i), "id")), f"{i}.id",
                                    f"criterion id {c.id!r} appears twice"))
        seen.add(c.id)
    if problems:
        raise SuiteError(problems)
    return tuple(criteria)


def check_template(path: Path, text: str) -> list[Problem]:
    """A template must place every placeholder (a judge without delimiters or a rubric is not
    this judge) and name no other."""
    found = {m.group(1) for m in _PLACEHOLDER.finditer(text)}
    problems = [Problem(path, None, None, f"the template lacks the placeholder {{{{{name}}}}}")
                for name in PLACEHOLDERS if name not in found]
    problems += [Problem(path, None, None, f"unknown placeholder {{{{{name}}}}} (known: "
                         + ", ".join(PLACEHOLDERS) + ")")
                 for name in sorted(found - set(PLACEHOLDERS))]
    return problems


def fill_template(text: str, values: dict[str, str]) -> str:
    """Every ``{{name}}`` replaced in one pass, so a value that itself contains ``{{x}}`` is
    never expanded again."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def load_judge(path: Path, *, confine: Path | None = None) -> LoadedJudge:
    """Read and check ``judge.yaml``, its rubric and its template; raises ``SuiteError`` with
    every problem as file:line: field. With ``confine`` (a bundle's folder), the rubric and
    the template must resolve inside it, after symbolic links."""
    path = Path(path)
    if path.is_dir():
        path = path / "judge.yaml"
    if not path.exists():
        raise SuiteError.one(path, "no such judge file")
    if confine is not None and not _inside(path, confine):
        raise SuiteError.one(path, f"the judge file leads outside {confine} (through a "
                             "symbolic link): refused")
    text = read_text(path, limit=JUDGE_FILE_MAX_BYTES, what="the judge file")[1]
    data = load_mapping(path, text)
    try:
        spec = JudgeSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(path, text, exc, model=JudgeSpec) from exc
    lines = key_lines(text)
    if spec.base_url and spec.base_url_env:
        raise SuiteError.one(path, "give base_url or base_url_env, not both",
                             line=line_of(lines, ("base_url_env",)), field="base_url_env")
    rubric_path = path.parent / spec.rubric
    rubric_bytes, rubric_text = _read(rubric_path, what="rubric file", at=path,
                                      line=line_of(lines, ("rubric",)), field="rubric",
                                      limit=RUBRIC_FILE_MAX_BYTES, confine=confine)
    criteria = load_criteria(rubric_path, rubric_text)
    if spec.template:
        template_path = path.parent / spec.template
        template_bytes, template_text = _read(
            template_path, what="template", at=path, line=line_of(lines, ("template",)),
            field="template", limit=TEMPLATE_FILE_MAX_BYTES, confine=confine)
    else:
        template_path = BUILTIN_TEMPLATE
        template_bytes = BUILTIN_TEMPLATE.read_bytes()
        template_text = template_bytes.decode("utf-8")
    problems = check_template(template_path, template_text)
    if problems:
        raise SuiteError(problems)
    rubric_sha = hashlib.sha256(rubric_bytes).hexdigest()
    template_sha = hashlib.sha256(template_bytes).hexdigest()
    return LoadedJudge(spec=spec, path=path.resolve(), criteria=criteria,
                       rubric_sha256=rubric_sha, template_sha256=template_sha,
                       contract=CONTRACT,
                       revision=revision_of(spec.model, rubric_sha, template_sha,
                                            spec.temperature, spec.max_tokens),
                       template_text=template_text)
