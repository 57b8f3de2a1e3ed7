"""Narrow-task suites: the layout teams already keep (cases JSONL, a fixed prompt, optional YAML).

Everything is validated before any model is called, so a typo costs a second, not a paid run.
That includes the scorer (``suite.yaml`` ``scorer:``, see ``suites/scorer_config.py``) and every
case's ``expected`` against it: a string label for ``label``, a number for ``numeric``, an
object with every listed field for ``json_fields``.

``suite.yaml`` and the system prompt are read bounded (1 MiB each, ``suites/limits.py``) and
the cases one line at a time with a bound per line (``suites/jsonl.py``): a suite may come from
anyone, and a file that cannot be a real suite is refused before it is parsed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from assay.suites.errors import Problem, SuiteError
from assay.suites.jsonl import iter_jsonl_objects
from assay.suites.limits import PROMPT_FILE_MAX_BYTES, SUITE_FILE_MAX_BYTES
from assay.suites.scorer_config import (
    LABEL,
    ScorerSpec,
    check_expected,
    normalize_label,
    parse_scorer,
    problems_at,
)
from assay.suites.textfile import read_text
from assay.suites.tiers import SuiteTier, select_cases, selected_text, sha256_text, tier_named
from assay.suites.yamlfile import key_lines, line_of, parse_yaml, unknown_key_message

CASES_FILE = Path("data/cases.jsonl")
TRAIN_FILE = Path("data/train.jsonl")
PROMPT_FILE = Path("prompts/system.txt")
CONFIG_FILE = Path("suite.yaml")


class SuiteConfig(BaseModel):
    """``suite.yaml``. Unknown keys are refused: a misspelt ``temprature`` must not be ignored."""

    # Attribute docstrings become the field descriptions docs/reference/suite.md shows.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    description: str | None = None
    """What the suite is for, shown in reports."""
    labels: list[str] | None = None
    """The allowed labels (compared stripped and lower-cased); null: the set of ``expected``
    values. Only with the ``label`` scorer."""
    output_field: str = "label"
    """The JSON field of the answer that holds the label."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature (``--temperature`` overrides)."""
    repeats: int = Field(default=1, ge=1, le=100)
    """Answers per case (``--repeats`` overrides); a case's repeats are one cluster, not new
    cases, in every interval."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Passed to the endpoint; null: the endpoint's default."""
    splits: dict[str, str] = Field(default_factory=dict)
    """Other case files by name (``--split NAME``), relative to the suite."""
    scorer: Any = None
    """Who decides that an answer is right: ``label`` when absent; checked by
    ``parse_scorer`` (its errors name nested keys). See docs/guide/narrow.md, Scorers."""
    tiers: dict[str, SuiteTier | None] | None = None
    """Named selections of the cases for ``assay run --tier`` (``suites/tiers.py``)."""

    @field_validator("labels")
    @classmethod
    def _labels_ok(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        norm = [normalize_label(x) for x in v]
        if not norm or any(not x for x in norm):
            raise ValueError("labels must be a non-empty list of non-empty strings")
        if len(set(norm)) != len(norm):
            raise ValueError("labels repeat after lower-casing")
        return norm

    @field_validator("output_field")
    @classmethod
    def _field_ok(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("output_field must not be empty")
        return v


#: what a case expects: a label or text (str), a number, an object (json_fields), or nothing
#: (a judge case without a reference)
Expected = str | int | float | dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    input: str
    expected: Expected
    line: int


@dataclass(frozen=True)
class NarrowSuite:
    root: Path
    name: str
    cases: tuple[Case, ...]
    system_prompt: str
    labels: tuple[str, ...]  # empty unless the scorer is label
    labels_source: str | None  # "suite.yaml" or "cases" (the run output says which); None
    # when the scorer is not label
    config: SuiteConfig
    cases_path: Path
    prompt_path: Path
    cases_sha256: str
    prompt_sha256: str
    train_path: Path | None
    train_sha256: str | None
    scorer: ScorerSpec = LABEL
    tier: str | None = None
    """The tier run (``--tier``), when one was chosen."""
    cases_text: str | None = None
    """With a tier: the exact lines of its cases (their digest is ``cases_sha256``)."""

    def train_cases(self) -> list[Case]:
        """Examples for the built-in baseline, validated like the cases themselves."""
        if self.train_path is None:
            raise SuiteError.one(self.root / TRAIN_FILE,
                                 "builtin/baseline needs training examples: add "
                                 "data/train.jsonl (same shape as data/cases.jsonl)")
        cases, _ = _load_cases(self.train_path, set(self.labels), self.scorer)
        return list(cases)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def load_config(root: Path) -> SuiteConfig:
    return _load_config(root)[0]


def _load_config(root: Path) -> tuple[SuiteConfig, ScorerSpec]:
    """The settings and the scorer, both checked (one SuiteError lists every problem)."""
    path = root / CONFIG_FILE
    if not path.exists():
        return SuiteConfig(), LABEL
    text = read_text(path, limit=SUITE_FILE_MAX_BYTES, what="suite.yaml")[1]
    data: Any = parse_yaml(path, text)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SuiteError.one(path, "expected a mapping of settings at the top level")
    lines = key_lines(text)
    spec, found = parse_scorer(data.get("scorer"), root)
    problems = problems_at(path, lines, found)
    if spec.type != "label" and data.get("labels") is not None:
        problems.append(Problem(path, line_of(lines, ("labels",)), "labels",
                                f"labels apply to scorer label only, not {spec.type}"))
    try:
        config = SuiteConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = [str(x) for x in err["loc"]]
            field = ".".join(loc) if loc else None
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = unknown_key_message(SuiteConfig, tuple(loc)) or msg
            problems.append(Problem(path, line_of(lines, tuple(loc[:1])) if loc else None, field,
                                    msg))
        raise SuiteError(problems) from exc
    if problems:
        raise SuiteError(problems)
    if spec.type == "json_fields" and "output_field" in config.model_fields_set:
        spec = replace(spec, object_field=config.output_field)
    return config, spec


def _load_cases(path: Path, labels: set[str] | None,
                scorer: ScorerSpec = LABEL) -> tuple[tuple[Case, ...], list[Problem]]:
    problems: list[Problem] = []
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl_objects(path, problems):
        ok = True
        for key in ("id", "input"):
            if key not in obj:
                problems.append(Problem(path, lineno, key, "missing"))
                ok = False
            elif not isinstance(obj[key], str):
                problems.append(Problem(path, lineno, key,
                                        f"must be a string, got {type(obj[key]).__name__}"))
                ok = False
            elif not obj[key].strip():
                problems.append(Problem(path, lineno, key, "must not be empty"))
                ok = False
        if "expected" not in obj and scorer.type != "judge":
            problems.append(Problem(path, lineno, "expected", "missing"))
            ok = False
        else:
            expected, bad = check_expected(scorer, obj.get("expected"), labels)
            problems += [Problem(path, lineno, where, msg) for where, msg in bad]
            ok = ok and not bad
        if not ok:
            continue
        cid = obj["id"]
        if cid in seen:
            problems.append(Problem(path, lineno, "id",
                                    f"duplicate id {cid!r} (first on line {seen[cid]})"))
            continue
        seen[cid] = lineno
        cases.append(Case(id=cid, input=obj["input"], expected=expected, line=lineno))
    if problems:
        raise SuiteError(problems)
    return tuple(cases), problems


def load_suite(root: Path, *, split: str | None = None,
               tier: str | None = None) -> NarrowSuite:
    """Load and validate a narrow-task suite directory; raise :class:`SuiteError` on any problem."""
    root = Path(root)
    if not root.is_dir():
        raise SuiteError.one(root, "suite directory not found")
    config, scorer = _load_config(root)
    if split is not None:
        if split not in config.splits:
            known = ", ".join(sorted(config.splits)) or "none defined"
            raise SuiteError.one(root / CONFIG_FILE, f"unknown split {split!r} ({known})",
                                 field="splits")
        cases_path = root / config.splits[split]
    else:
        cases_path = root / CASES_FILE
    prompt_path = root / PROMPT_FILE
    if not prompt_path.exists():
        raise SuiteError.one(prompt_path, "system prompt file not found: the suite needs its "
                             "fixed, strict prompt in prompts/system.txt")
    system_prompt = read_text(prompt_path, limit=PROMPT_FILE_MAX_BYTES,
                              what="the system prompt")[1]
    if not system_prompt.strip():
        raise SuiteError.one(prompt_path, "system prompt is empty")

    labels: tuple[str, ...]
    source: str | None
    if scorer.type != "label":
        cases, _ = _load_cases(cases_path, None, scorer)
        labels, source = (), None
    elif config.labels is not None:
        labels = tuple(config.labels)
        source = "suite.yaml"
        cases, _ = _load_cases(cases_path, set(labels))
    else:
        cases, _ = _load_cases(cases_path, None)
        labels = tuple(sorted({str(c.expected) for c in cases}))
        source = "cases"
    train_path = root / TRAIN_FILE
    cases_sha256, cases_text = sha256_file(cases_path), None
    if tier is not None:
        chosen = select_cases(cases, tier_named(config.tiers, tier, root / CONFIG_FILE), tier,
                              root / CONFIG_FILE)
        if len(chosen) != len(cases):  # a tier of every case runs the file as it is
            cases, cases_text = tuple(chosen), selected_text(cases_path, chosen)
            cases_sha256 = sha256_text(cases_text)
    return NarrowSuite(
        root=root,
        name=root.resolve().name,
        cases=cases,
        system_prompt=system_prompt,
        labels=labels,
        labels_source=source,
        config=config,
        cases_path=cases_path,
        prompt_path=prompt_path,
        cases_sha256=cases_sha256,
        prompt_sha256=hashlib.sha256(system_prompt.encode("utf-8")).hexdigest(),
        train_path=train_path if train_path.is_file() else None,
        train_sha256=sha256_file(train_path) if train_path.is_file() else None,
        scorer=scorer,
        tier=tier,
        cases_text=cases_text,
    )
