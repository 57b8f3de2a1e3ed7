"""What a coding run writes: answers, automatic grades in revisions, and the manifest.

Answers and grades are kept apart so a fixed grader can grade the same answers again: a grader
appends one :class:`GradeRow` per answer to ``grades/<revision>.jsonl`` beside a
:class:`GradeMeta` written once, and :func:`graded_samples` joins answers with one revision into
the view reports read. The runner appends one :class:`SampleRow` per task and sample to
``samples.jsonl``; it grades each answer into revision ``v1`` before writing the row and copies
that verdict (``passed``, ``reason``, ``exec``) into it, because ``samples.jsonl`` is an interface
other tools read with those keys. The copy is the run's own verdict only: reports read the
revision they are asked for, and a regrade never touches the row.

Runs from before the split (sample schema 1, manifest schema 1) carry their grade inside each
row; they are read as one revision named :data:`INLINE_REVISION`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from assay.errors import RecordError
from assay.records.base import Record
from assay.records.io import iter_rows
from assay.records.layout import (
    GRADE_META_SUFFIX,
    SAMPLES,
    grade_meta_path,
    grade_revisions,
    grade_rows_path,
    sample_key,
    standing_rows,
)
from assay.records.manifest import ManifestBase, ModelInfo, check_row_schema

#: the name under which a run that graded inside its rows reports its grades
INLINE_REVISION = "inline"


class SampleRow(Record):
    """One answer of a model to one coding task, with the run's own verdict on it (a copy of
    its grade in revision ``v1``)."""

    schema_name: ClassVar[str] = "assay.coding.sample"
    schema_version: ClassVar[int] = 3
    file: ClassVar[str] = SAMPLES

    id: str
    """The task id."""
    sample: int
    """Which sample of the task this is (0-based); a key with ``id``."""
    type: str
    """The task type: ``unit``, ``diff`` or ``rubric``."""
    language: str | None = None
    """The task's language (``python``, ``javascript``); None for diff tasks without one."""
    raw: str | None = None
    """The answer text; None when no answer arrived."""
    code: str | None = None
    """What the grader gets: the code (or diff) extracted from ``raw``."""
    latency_ms: float | None = None
    """Time of the successful request, backoff waits excluded; None on an infra error."""
    usage: dict[str, Any] | None = None
    """Token usage as the endpoint reported it; None when it did not."""
    served_model: str | None = None
    """The model id the endpoint said answered."""
    system_fingerprint: str | None = None
    """The endpoint's system fingerprint, when it sent one."""
    finish_reason: str | None = None
    """Why the endpoint stopped generating."""
    error: str | None = None
    """Set on an infra error: no usable answer; the sample is asked again on resume."""
    tries: list[dict[str, Any]] = []
    """Every HTTP request: ``status``, ``ms``, and ``error`` / ``wait_s`` when there were."""
    fatal: bool | None = None
    """Present (true) only when this error stopped the run (bad key, model or URL)."""
    passed: bool | None = None
    """The run's own verdict (revision ``v1`` at answer time); None for an infra error, a
    grader error or a rubric answer. Schema 2 rows had none; later revisions live in grades/."""
    reason: str | None = None
    """Why: ``ok``, ``nonzero_exit``, ``timeout``, ``does_not_apply``, ``infra_error``, …"""
    exec: dict[str, Any] | None = None
    """What the execution did (exit code, tails, limits applied), when something ran."""

    def to_row(self) -> dict[str, Any]:
        """The JSON object written; ``fatal`` only when set."""
        row = dict(self.__dict__)
        if row.get("fatal") is None:
            row.pop("fatal", None)
        return row


class GradeRow(Record):
    """One automatic verdict on one recorded answer."""

    schema_name: ClassVar[str] = "assay.coding.grade"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "grades/<revision>.jsonl"

    id: str
    """The task id of the answer graded."""
    sample: int
    """The sample of the answer graded."""
    type: str
    """The task type, which chose the grader."""
    passed: bool | None
    """The verdict; None when there is none (rubric answers, grader infra errors)."""
    reason: str
    """Why: ``ok``, ``nonzero_exit``, ``timeout``, ``same_result``, ``does_not_apply``, ...,
    ``needs_human_grade`` for rubric answers, ``sandbox_error`` when grading failed."""
    exec: dict[str, Any] | None = None
    """What the execution did: exit code, output tails, limits applied, isolation."""
    error: str | None = None
    """Set when the grader itself failed (sandbox unavailable, golden diff broken): no verdict;
    the answer is graded again by the next session of this revision."""
    graded_at: str
    """UTC time of this verdict."""
    code: str | None = None
    """The code graded, only when it differs from the answer row's ``code`` (the extractor
    changed since the answer was recorded)."""


class GradeMeta(Record):
    """Who graded a revision, with what, and under which limits (written once)."""

    schema_name: ClassVar[str] = "assay.coding.grades"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = f"grades/<revision>{GRADE_META_SUFFIX}"

    revision: str
    """The revision's name, also its file stem."""
    kind: Literal["auto"] = "auto"
    """``auto``: the graders of the type table (rubric grades live in ``grades/rubric/``)."""
    source: str
    """``run`` (graded as the answers arrived) or ``regrade`` (``assay regrade``)."""
    created_at: str
    """UTC time the revision was created."""
    assay: dict[str, Any]
    """assay's version and git commit: the grader code that decided."""
    graders: dict[str, str]
    """Task type -> the grader that decides it."""
    sandbox: dict[str, Any]
    """Isolation and limits every execution was asked to run under."""
    tasks_sha256: str
    """sha256 of the tasks file the answers were graded against."""
    row_schema: str
    """Schema id of the rows in ``<revision>.jsonl``."""

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema_id(), **self.model_dump(mode="json")}

    @classmethod
    def load(cls, data: dict[str, Any], where: Path | str) -> GradeMeta:
        cls.check_schema_id(data.get("schema"), where)
        body = {k: v for k, v in data.items() if k != "schema"}
        meta = cls.read(body, where)
        GradeRow.check_schema_id(meta.row_schema, f"{where}: row_schema")
        return meta


class CodingSuiteInfo(Record):
    """Which tasks file was run."""

    name: str
    """The tasks file's name (without ``.jsonl``)."""
    path: str
    """Absolute path of the tasks file when the run started."""
    tasks_sha256: str
    """sha256 of the tasks file; ``suite/tasks.jsonl`` in the run is a copy of it."""
    n_tasks: int
    """Tasks in the file."""
    types: dict[str, int]
    """How many tasks of each type."""
    task_ids: list[str]
    """Every task id, in file order (reports list tasks in this order)."""


class CodingParameters(Record):
    """What the model was asked with."""

    samples: int
    """Answers per task."""
    temperature: float
    """Sampling temperature."""
    max_tokens: int | None = None
    """``max_tokens`` sent, if any."""
    instructions: dict[str, str]
    """The fixed instruction appended to every task prompt, per task type."""


class CodingManifest(ManifestBase):
    """A coding run. Schema 2: grades live in ``grades/<revision>.jsonl``, not in the rows."""

    schema_name: ClassVar[str] = "assay.coding.manifest"
    schema_version: ClassVar[int] = 2

    kind: Literal["coding"] = "coding"
    """Always ``coding``."""
    suite: CodingSuiteInfo
    """The tasks file that was run."""
    model: ModelInfo
    """The model as asked and as served."""
    parameters: CodingParameters
    """What the model was asked with."""
    isolation: str
    """``bwrap``, or ``none`` when candidate code ran without the sandbox."""
    not_isolated: bool
    """True with ``isolation: none``: every report then says NOT ISOLATED."""


ROW_SCHEMAS = {SAMPLES: SampleRow.schema_id(), "grades/*.jsonl": GradeRow.schema_id()}


def read_samples(run_dir: Path, manifest: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """The standing answer row of every (task, sample), each validated."""
    path = run_dir / SAMPLES
    check_row_schema(manifest, SAMPLES, SampleRow, run_dir / "manifest.json")
    rows = (SampleRow.read(r, path).__dict__ for r in iter_rows(path))
    return standing_rows(rows, sample_key)


def read_meta(run_dir: Path, revision: str) -> GradeMeta:
    import json

    path = grade_meta_path(run_dir, revision)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{run_dir}: no grade revision {revision!r} "
                          f"(have: {', '.join(grade_revisions(run_dir)) or 'none'})") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object")
    return GradeMeta.load(data, path)


def read_grades(run_dir: Path, revision: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The standing grade of every answer in one revision (a later verdict stands over a
    grader error), each validated."""
    read_meta(run_dir, revision)
    path = grade_rows_path(run_dir, revision)
    rows = (GradeRow.read(r, path).model_dump() for r in iter_rows(path))
    return standing_rows(rows, sample_key)


def newest_revision(run_dir: Path) -> str | None:
    """The revision created last (by its meta's ``created_at``, then name)."""
    metas = [read_meta(run_dir, name) for name in grade_revisions(run_dir)]
    if not metas:
        return None
    return max(metas, key=lambda m: (m.created_at, m.revision)).revision


def graded_samples(run_dir: Path, manifest: dict[str, Any], revision: str | None = None
                   ) -> tuple[str | None, dict[tuple[str, int], dict[str, Any]]]:
    """(revision used, every standing answer joined with its grade in that revision).

    The joined row is the answer plus ``passed``, ``reason`` and ``exec``; an answer whose
    grader failed carries the grader's ``error`` (no verdict, an infra error like a failed
    request); an answer not yet graded in the revision has ``reason: "ungraded"``. Without
    ``revision`` the newest is used; a run that graded inline reads as ``inline``."""
    answers = read_samples(run_dir, manifest)
    if revision is None:
        revision = newest_revision(run_dir)
    if revision is None or revision == INLINE_REVISION:
        if _grades_inline(manifest):
            return INLINE_REVISION, answers
        if revision == INLINE_REVISION:
            raise RecordError(f"{run_dir}: this run has no inline grades; its revisions are "
                              f"in grades/ ({', '.join(grade_revisions(run_dir)) or 'none'})")
        grades: dict[tuple[str, int], dict[str, Any]] = {}
    else:
        grades = read_grades(run_dir, revision)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for key, row in answers.items():
        joined = dict(row)
        if row.get("error"):
            joined.update(passed=None, reason="infra_error", exec=None)
        elif key in grades:
            g = grades[key]
            joined.update(passed=g["passed"], reason=g["reason"], exec=g["exec"],
                          error=g["error"])
        else:
            joined.update(passed=None, reason="ungraded", exec=None)
        out[key] = joined
    return revision, out


def _grades_inline(manifest: dict[str, Any]) -> bool:
    """Runs written before grading was split from running (coding manifest schema 1)."""
    return manifest.get("schema") == "assay.coding.manifest/1"
