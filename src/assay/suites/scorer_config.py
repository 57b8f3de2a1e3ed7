"""The ``scorer:`` of a narrow suite: which rule decides that an answer is right, and whether
every case's ``expected`` is something that rule can compare against.

It lives with the suite (not with the scorers in ``grading``) because it is part of what the
suite declares and must be checked before any model is called, like the labels: a ``numeric``
case whose expected value is ``"twelve"`` is a suite error at ``cases.jsonl:7: field
'expected'``, not a wrong answer found after a paid run. The text folding is here too, for the
same reason: it is the suite's contract (its id is recorded in the manifest, so two runs folded
differently are not compared), and the loader uses it to refuse an expected text that folds to
nothing.

``scorer:`` is a name (``label``) or a mapping with ``type`` and that type's options; a
``json_fields`` field is a rule name or a mapping with ``rule`` and its options.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.suites.errors import Problem

SCORER_TYPES = ("label", "normalized_text", "numeric", "json_fields", "judge")
FIELD_RULES = ("exact", "normalized_text", "numeric", "json_fields")
#: what each scorer type may read; the first is the default
READS = {"label": ("json",), "normalized_text": ("json", "text"), "numeric": ("json", "text"),
         "json_fields": ("json",), "judge": ("text", "json")}
#: options each scorer type accepts besides ``type``
OPTIONS = {"label": ("reads",), "normalized_text": ("reads",),
           "numeric": ("reads", "abs_tol", "rel_tol"), "json_fields": ("reads", "fields"),
           "judge": ("reads", "judge", "pass")}
FIELD_OPTIONS = {"exact": (), "normalized_text": (), "numeric": ("abs_tol", "rel_tol"),
                 "json_fields": ("fields",)}

#: id of the text folding below; recorded so a change of the folding is a change of contract
FOLD_ID = "assay.fold/1"
FOLD_WORDS = ("Unicode NFKC, then case-folded (so 'ﬁ' is 'fi', full-width '１２' is '12', "
              "'Straße' is 'STRASSE'), punctuation (Unicode category P*) removed, whitespace "
              "runs made one space, ends trimmed")
_SPACE = re.compile(r"\s+")


def fold_text(text: str) -> str:
    """The normal form two texts are compared in (see :data:`FOLD_WORDS`)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # NFKC again: case-folding can produce sequences that compose differently
    folded = unicodedata.normalize("NFKC", folded)
    kept = "".join(ch for ch in folded if not unicodedata.category(ch).startswith("P"))
    return _SPACE.sub(" ", kept).strip()


@dataclass(frozen=True)
class FieldRule:
    """How one field of a ``json_fields`` answer is compared."""

    rule: str
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    fields: tuple[tuple[str, FieldRule], ...] = ()

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule}
        if self.rule == "numeric":
            out |= {"abs_tol": self.abs_tol, "rel_tol": self.rel_tol}
        if self.rule == "json_fields":
            out["fields"] = {name: r.to_record() for name, r in self.fields}
        return out


@dataclass(frozen=True)
class ScorerSpec:
    """A validated ``scorer:``. ``to_record`` is what the manifest keeps and what makes two
    runs comparable."""

    type: str = "label"
    reads: str = "json"
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    fields: tuple[tuple[str, FieldRule], ...] = ()
    judge: Path | None = None  # judge.yaml, resolved against the suite
    pass_rule: dict[str, Any] = field(default_factory=dict)  # judge: {criterion, at_least}
    object_field: str | None = None  # json_fields: the answer's field holding the object
    # (suite.yaml set output_field), else None: the whole answer object
    judge_loaded: Any = field(default=None, compare=False)  # judge: its LoadedJudge

    def uses_fold(self) -> bool:
        def any_fold(fields: tuple[tuple[str, FieldRule], ...]) -> bool:
            return any(r.rule == "normalized_text" or any_fold(r.fields) for _, r in fields)
        return self.type == "normalized_text" or any_fold(self.fields)

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "reads": self.reads}
        if self.type == "numeric":
            out |= {"abs_tol": self.abs_tol, "rel_tol": self.rel_tol}
        if self.type == "json_fields":
            out["object_field"] = self.object_field
            out["fields"] = {name: r.to_record() for name, r in self.fields}
        if self.type == "judge":
            out |= {"judge": str(self.judge), "pass": dict(self.pass_rule),
                    "judge_revision": getattr(self.judge_loaded, "revision", None)}
        if self.uses_fold():
            out["normalization"] = FOLD_ID
        return out


LABEL = ScorerSpec()


def normalize_label(value: str) -> str:
    """Labels compare stripped and lower-cased: 'Bug ' and 'bug' are the same verdict."""
    return value.strip().lower()


def _loc(*parts: str) -> str:
    return ".".join(parts)


def _tolerance(raw: dict[str, Any], name: str, where: tuple[str, ...],
               problems: list[tuple[tuple[str, ...], str]]) -> float:
    value = raw.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        problems.append(((*where, name), f"must be a finite number >= 0, got {value!r}"))
        return 0.0
    return float(value)


def _field_rules(raw: Any, where: tuple[str, ...],
                 problems: list[tuple[tuple[str, ...], str]]
                 ) -> tuple[tuple[str, FieldRule], ...]:
    if not isinstance(raw, dict) or not raw:
        problems.append((where, "must be a non-empty mapping of field name to rule"))
        return ()
    out = []
    for name, spec in raw.items():
        here = (*where, str(name))
        if isinstance(spec, str):
            spec = {"rule": spec}
        if not isinstance(spec, dict):
            problems.append((here, f"must be a rule name ({', '.join(FIELD_RULES)}) or a "
                             "mapping with 'rule'"))
            continue
        rule = spec.get("rule")
        if rule not in FIELD_RULES:
            problems.append(((*here, "rule"), f"must be one of {', '.join(FIELD_RULES)}, got "
                             f"{rule!r}"))
            continue
        for key in spec:
            if key != "rule" and key not in FIELD_OPTIONS[rule]:
                allowed = ", ".join(("rule", *FIELD_OPTIONS[rule]))
                problems.append(((*here, str(key)), f"unknown option for rule {rule} "
                                 f"(allowed: {allowed})"))
        fr = FieldRule(rule=rule)
        if rule == "numeric":
            fr = FieldRule(rule, _tolerance(spec, "abs_tol", here, problems),
                           _tolerance(spec, "rel_tol", here, problems))
        elif rule == "json_fields":
            fr = FieldRule(rule, fields=_field_rules(spec.get("fields"), (*here, "fields"),
                                                     problems))
        out.append((str(name), fr))
    return tuple(out)


def parse_scorer(raw: Any, root: Path) -> tuple[ScorerSpec, list[tuple[tuple[str, ...], str]]]:
    """The spec from ``suite.yaml``'s ``scorer`` value and the problems, each with the key path
    it is about (the caller turns paths into file:line:field)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    if raw is None:
        return LABEL, problems
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, dict):
        return LABEL, [(("scorer",), "must be a scorer name or a mapping with 'type'")]
    kind = raw.get("type")
    if kind not in SCORER_TYPES:
        return LABEL, [(("scorer", "type"), f"must be one of {', '.join(SCORER_TYPES)}, got "
                        f"{kind!r}")]
    where = ("scorer",)
    for key in raw:
        if key != "type" and key not in OPTIONS[kind]:
            problems.append(((*where, str(key)), f"unknown option for scorer {kind} (allowed: "
                             + ", ".join(("type", *OPTIONS[kind])) + ")"))
    reads = raw.get("reads", READS[kind][0])
    if reads not in READS[kind]:
        problems.append(((*where, "reads"), f"scorer {kind} reads {' or '.join(READS[kind])}, "
                         f"not {reads!r}"))
        reads = READS[kind][0]
    spec = ScorerSpec(type=kind, reads=reads)
    if kind == "numeric":
        spec = ScorerSpec(kind, reads, _tolerance(raw, "abs_tol", where, problems),
                          _tolerance(raw, "rel_tol", where, problems))
    elif kind == "json_fields":
        spec = ScorerSpec(kind, reads, fields=_field_rules(raw.get("fields"),
                                                           (*where, "fields"), problems))
    elif kind == "judge":
        spec = _judge_spec(raw, root, reads, problems)
    return spec, problems


def _judge_spec(raw: dict[str, Any], root: Path, reads: str,
                problems: list[tuple[tuple[str, ...], str]]) -> ScorerSpec:
    """The judge (loaded and pinned now, so a broken rubric is found before any call) and the
    pass rule, checked against the criterion's scale: ``at_least`` for an integer scale,
    ``one_of`` (the passing labels) for either."""
    from assay.suites.errors import SuiteError
    from assay.suites.judge_spec import load_judge

    path = raw.get("judge")
    loaded = None
    judge_file: Path | None = None
    if not isinstance(path, str) or not path.strip():
        problems.append((("scorer", "judge"), "must be the path of a judge.yaml (relative to "
                         "the suite)"))
    elif not (root / path).is_file():
        problems.append((("scorer", "judge"), f"judge file not found: {root / path}"))
    else:
        try:
            loaded = load_judge(root / path)
            judge_file = (root / path).resolve()
        except SuiteError as exc:
            problems += [(("scorer", "judge"), str(p)) for p in exc.problems]
    rule = raw.get("pass")
    where = ("scorer", "pass")
    if not isinstance(rule, dict) or "criterion" not in rule \
            or len(set(rule) & {"at_least", "one_of"}) != 1 \
            or not set(rule) <= {"criterion", "at_least", "one_of"}:
        problems.append((where, "must be {criterion: <id>, at_least: <integer score>} or "
                         "{criterion: <id>, one_of: [<passing scores>]}"))
        rule = {}
    elif loaded is not None:
        criterion = loaded.criterion(str(rule["criterion"]))
        if criterion is None:
            ids = ", ".join(c.id for c in loaded.criteria)
            problems.append(((*where, "criterion"), f"{rule['criterion']!r} is not a criterion "
                             f"of the judge's rubric ({ids})"))
        elif "at_least" in rule:
            value = rule["at_least"]
            if not criterion.is_range or type(value) is not int \
                    or criterion.normalise(value) is None:
                problems.append(((*where, "at_least"), f"must be an integer on the scale of "
                                 f"{criterion.id} ({criterion.describe_scale()}); a label scale "
                                 "takes one_of"))
        else:
            values = rule["one_of"]
            if not isinstance(values, list) or not values \
                    or any(criterion.normalise(v) is None for v in values):
                problems.append(((*where, "one_of"), f"must be a list of scores of "
                                 f"{criterion.id} ({criterion.describe_scale()})"))
            else:
                rule = {**rule, "one_of": [criterion.normalise(v) for v in values]}
    return ScorerSpec("judge", reads, judge=judge_file,
                      pass_rule=dict(rule), judge_loaded=loaded)


# --------------------------------------------------------------------------- expected values


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def is_number(value: Any) -> bool:
    """A JSON number (bool is not one, though Python says it is an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_value(rule: str, fields: tuple[tuple[str, FieldRule], ...], value: Any,
                 where: str) -> list[tuple[str, str]]:
    if rule == "normalized_text":
        if not isinstance(value, str):
            return [(where, f"must be a string, got {_type_name(value)}")]
        if not fold_text(value):
            return [(where, f"{value!r} is empty once normalised")]
    elif rule == "numeric":
        if not is_number(value):
            return [(where, f"must be a JSON number, got {_type_name(value)} {value!r}"[:200])]
        if not math.isfinite(value):
            return [(where, f"must be finite, got {value!r}")]
    elif rule == "json_fields":
        if not isinstance(value, dict):
            return [(where, f"must be a JSON object, got {_type_name(value)}")]
        out: list[tuple[str, str]] = []
        listed = dict(fields)
        for name, sub in fields:
            if name not in value:
                out.append((_loc(where, name), "missing (the scorer lists this field)"))
            else:
                out += _check_value(sub.rule, sub.fields, value[name], _loc(where, name))
        extra = [k for k in value if k not in listed]
        if extra:
            out.append((where, "has fields the scorer does not list (add them to "
                        f"scorer.fields or remove them): {', '.join(map(str, extra))}"))
        return out
    return []


def check_expected(spec: ScorerSpec, value: Any,
                   labels: set[str] | None) -> tuple[Any, list[tuple[str, str]]]:
    """(the expected value as the scorer keeps it, problems as (field, message)).

    ``label`` keeps today's rules (a non-empty string, lower-cased, one of the labels);
    ``judge`` takes any expected value or none (a reference the judge may be shown)."""
    if spec.type == "judge":
        if value is not None and not isinstance(value, str):
            return None, [("expected", "must be a string (a reference answer the judge is "
                           f"shown) or absent, got {_type_name(value)}")]
        return value, []
    if spec.type == "label":
        if not isinstance(value, str):
            return None, [("expected", f"must be a string, got {type(value).__name__}")]
        if not value.strip():
            return None, [("expected", "must not be empty")]
        label = normalize_label(value)
        if labels is not None and label not in labels:
            return None, [("expected", f"{value!r} is not one of the labels {sorted(labels)}")]
        return label, []
    rule = "json_fields" if spec.type == "json_fields" else spec.type
    problems = _check_value(rule, spec.fields, value, "expected")
    return (None if problems else value), problems


def problems_at(path: Path, lines: dict[tuple[str, ...], int],
                found: list[tuple[tuple[str, ...], str]]) -> list[Problem]:
    """Key-path problems of ``suite.yaml`` as file:line:field problems."""
    from assay.suites.yamlfile import line_of

    return [Problem(path, line_of(lines, loc), ".".join(loc), msg) for loc, msg in found]


def contract_reply(spec: ScorerSpec, output_field: str, value: Any) -> str:
    """The reply the suite's scorer reads as ``value``: the contract a prompt must ask for
    (``builtin/oracle`` answers in it; ``assay suite check`` and the run's hint show it)."""
    import json

    if spec.type == "label":
        return json.dumps({output_field: value})
    if spec.type != "json_fields" and spec.reads == "text":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if spec.type == "json_fields":
        field_name = spec.object_field
        return json.dumps(value if field_name is None else {field_name: value},
                          ensure_ascii=False)
    return json.dumps({output_field: value}, ensure_ascii=False)


def contract_shape(spec: ScorerSpec, output_field: str, labels: tuple[str, ...] = ()) -> str:
    """The reply's shape in one line, for a person writing the prompt:
    ``{"label": "<bug|feature|question>"}``, ``{"answer": <number>}``, ``a JSON object``."""
    if spec.type != "json_fields" and spec.reads == "text":
        return "the answer as plain text"
    if spec.type == "json_fields":
        inner = "{…}" if not spec.fields else (
            "{" + ", ".join(f'"{name}": …' for name, _ in spec.fields) + "}")
        return inner if spec.object_field is None else f'{{"{spec.object_field}": {inner}}}'
    if spec.type == "label" and labels:
        return f'{{"{output_field}": "<{"|".join(labels)}>"}}'
    what = "<number>" if spec.type == "numeric" else "<answer>"
    return f'{{"{output_field}": {what}}}'


def reads_json(spec: ScorerSpec) -> bool:
    """Whether the scorer reads a JSON object out of the reply (else the bare text)."""
    return spec.type == "json_fields" or spec.reads != "text"
