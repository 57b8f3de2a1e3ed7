"""The human grades a judge is calibrated against: a labelled file, or a rubric-graded run.

A labelled file (JSONL, one item a line) is the general way in::

    {"id": "a1", "answer": "Paris.", "context": "Capital of France?", "grades": {"correct": 3}}
    {"id": "a2", "material": {"kind": "artifact", "files": {"fix.py": "..."},
     "events": ["ran tests"], "context": "Fix the bug."}, "grades": {"correct": 1, "tone": "rude"}}

``answer`` (with an optional ``context``) or ``material`` (``kind`` is ``answer``, ``artifact``
or ``trajectory``); ``grades`` maps criterion ids of the judge to scores in their scales. A
grade for a criterion the judge does not have is not an error: it is reported as unmapped.

A coding run graded with ``assay grade`` is the other: its rubric grades carry one score from
0 to 3 per answer and no criterion id, so they map to the judge's criterion ``rubric``, or to
the judge's only criterion; the answer is the text the grader saw (the extracted code, blinded
the same way), and the task's prompt and grading notes are the context.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from assay.errors import GradingError, Problem, SuiteError
from assay.grading.judge.reply import Material, MaterialKind
from assay.grading.rubric.pool import build_pool
from assay.grading.rubric.revisions import SCORES, latest_grades
from assay.suites.judge_spec import LoadedJudge

KINDS: tuple[MaterialKind, ...] = get_args(MaterialKind)


@dataclass(frozen=True)
class HumanItem:
    """One graded piece of material."""

    id: str
    material: Material
    grades: dict[str, str | int]  # criterion id -> score, in the judge's scale


@dataclass(frozen=True)
class HumanGrades:
    """Every item, where they came from, and what did not map onto the judge."""

    kind: Literal["jsonl", "rubric_run"]  # a file of graded items, or a rubric-graded run
    path: Path
    items: tuple[HumanItem, ...]
    unmapped: tuple[str, ...]

    @property
    def sha256(self) -> str:
        """Over the items themselves (ids, material, grades), so the same grades read from a
        moved or re-serialised file are the same calibration set."""
        ident = [[i.id, i.material.sha256(), sorted(i.grades.items())] for i in self.items]
        return hashlib.sha256(json.dumps(ident, default=str).encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "sha256": self.sha256,
                "items": len(self.items)}


def load_human_grades(path: Path, judge: LoadedJudge) -> HumanGrades:
    """A labelled JSONL file or a rubric-graded coding run directory, mapped onto ``judge``."""
    path = Path(path)
    if path.is_dir():
        return _from_rubric_run(path, judge)
    if not path.is_file():
        raise GradingError(f"{path}: no such file or run directory")
    return _from_jsonl(path, judge)


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in value.items())


def _material(obj: dict[str, Any]) -> Material | str:
    """The item's material, or why it has none."""
    if ("answer" in obj) == ("material" in obj):
        return "give one of 'answer' or 'material'"
    if "answer" in obj:
        context = obj.get("context")
        if not isinstance(obj["answer"], str) or not isinstance(context, str | None):
            return "'answer' and 'context' are text"
        return Material.answer(obj["answer"], context=context)
    m = obj["material"]
    if not isinstance(m, dict):
        return "'material' is an object"
    extra = sorted(set(m) - {"kind", "files", "events", "context"})
    if extra:
        return f"'material' has unknown field(s) {', '.join(extra)}"
    if m.get("kind") not in KINDS:
        return f"'material.kind' is one of {', '.join(KINDS)}"
    files = m.get("files", {})
    events = m.get("events", [])
    if not _str_map(files):
        return "'material.files' maps paths to text"
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        return "'material.events' is a list of text"
    if not isinstance(m.get("context"), str | None):
        return "'material.context' is text"
    if not files and not events:
        return "'material' needs files or events to judge"
    return Material(kind=m["kind"], files=dict(files), events=tuple(events),
                    context=m.get("context"))


def _from_jsonl(path: Path, judge: LoadedJudge) -> HumanGrades:
    problems: list[Problem] = []
    items: list[HumanItem] = []
    unmapped: set[str] = set()
    seen: set[str] = set()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise GradingError(f"{path}: cannot be read ({exc})") from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue

        def bad(message: str, field: str | None = None, line: int = lineno) -> None:
            problems.append(Problem(path, line, field, message))

        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            bad(f"invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            bad("not a JSON object")
            continue
        extra = sorted(set(obj) - {"id", "answer", "context", "material", "grades"})
        if extra:
            bad(f"unknown field(s) {', '.join(extra)}")
        iid = obj.get("id")
        if not isinstance(iid, str) or not iid.strip():
            bad("a non-empty text id is needed", "id")
            continue
        if iid in seen:
            bad(f"id {iid!r} appears twice", "id")
        seen.add(iid)
        material = _material(obj)
        if isinstance(material, str):
            bad(material, "material" if "material" in obj else "answer")
        grades = obj.get("grades")
        if not isinstance(grades, dict) or not grades:
            bad("'grades' maps criterion ids to scores", "grades")
            continue
        mapped: dict[str, str | int] = {}
        for cid, value in grades.items():
            criterion = judge.criterion(cid)
            if criterion is None:
                unmapped.add(f"grades.{cid}")
                continue
            score = criterion.normalise(value)
            if score is None:
                bad(f"{json.dumps(value)} is not in the scale of {cid!r} "
                    f"({criterion.describe_scale()})", f"grades.{cid}")
                continue
            mapped[cid] = score
        if not isinstance(material, str):
            items.append(HumanItem(iid, material, mapped))
    if problems:
        raise SuiteError(problems)
    if not items:
        raise GradingError(f"{path}: no graded items")
    return HumanGrades("jsonl", path, tuple(items), tuple(sorted(unmapped)))


def rubric_target(judge: LoadedJudge) -> str:
    """The judge criterion a 0-3 rubric grade maps to: ``rubric``, or the only criterion."""
    ids = [c.id for c in judge.criteria]
    cid = "rubric" if "rubric" in ids else ids[0] if len(ids) == 1 else None
    if cid is None:
        raise GradingError("rubric grades carry one 0-3 score per answer and no criterion: "
                           "the judge needs a criterion 'rubric' or only one (it has "
                           f"{', '.join(ids)})")
    criterion = judge.criterion(cid)
    if criterion is None:  # pragma: no cover - cid was taken from the judge's own ids
        raise ValueError(cid)
    if any(criterion.normalise(s) is None for s in SCORES) or len(criterion.allowed()) != 4:
        raise GradingError(f"rubric grades are 0-3; the judge's criterion {cid!r} has the scale "
                           f"{criterion.describe_scale()}")
    return cid


def _from_rubric_run(run_dir: Path, judge: LoadedJudge) -> HumanGrades:
    cid = rubric_target(judge)
    pool = build_pool([run_dir], regrade=True)
    grades = latest_grades(run_dir)
    items = []
    for answer in sorted(pool.answers, key=lambda a: (a.task_id, a.sample)):
        row = grades.get((answer.task_id, answer.sample))
        if row is None:
            continue
        if row.get("answer_sha256") not in (None, pool.sha_of(answer)):
            continue  # graded on another text than the one on disk: not this answer's grade
        context = pool.redact(answer.prompt)
        if answer.rubric.strip():
            context += "\n\nGrading notes for this task:\n" + pool.redact(answer.rubric)
        material = Material.answer(pool.redact(answer.text), context=context)
        items.append(HumanItem(f"{answer.task_id}#{answer.sample}", material,
                               {cid: int(row["score"])}))
    if not items:
        raise GradingError(f"{run_dir}: no rubric answer has a grade yet (assay grade "
                           f"{run_dir})")
    return HumanGrades("rubric_run", run_dir, tuple(items), ())
