"""Blind human grading of rubric answers in coding runs: the names a caller needs, in one place.

Rubric answers cannot be auto-graded, so a person grades them, and a person's grade is only
worth something if they could not tell which model wrote the answer and if their verdict is
never silently replaced. The work is split by concern so each rule has one home:

- ``rubric_pool``: which answers there are and how they are blinded (opaque ids, redaction,
  a shuffle with a recorded seed);
- ``rubric_revisions``: grades on disk, append-only revisions that never overwrite
  (``RUN_DIR/grades/rubric/``, one file per grading round), and :func:`grades_as_of`, which
  the report unblinds with (the latest round by default);
- ``rubric_session``: the rules of one interactive sitting, behind a screen and an ``ask``
  seam (the terminal drawing lives in the CLI, ``assay.cli.rubric_ui``);
- ``rubric_csv``: the blind CSV round trip for graders who prefer a spreadsheet.
"""

from __future__ import annotations

from assay.errors import GradingError
from assay.grading.rubric.csv_file import (
    CSV_COLUMNS,
    EXPORT_SCHEMA,
    EXPORTS_DIR,
    export_csv,
    import_csv,
)
from assay.grading.rubric.pool import (
    REDACTED,
    SAMPLES,
    TASKS_SNAPSHOT,
    BlindAnswer,
    collect_answers,
    shuffle_answers,
)
from assay.grading.rubric.revisions import (
    GRADES_DIR,
    PASS_SCORE,
    REVISION_SCHEMA,
    SCORES,
    grades_as_of,
    latest_grades,
    rubric_rounds,
)
from assay.grading.rubric.session import GraderScreen, ShownAnswer, grade_session

__all__ = [
    "CSV_COLUMNS",
    "EXPORTS_DIR",
    "EXPORT_SCHEMA",
    "GRADES_DIR",
    "PASS_SCORE",
    "REDACTED",
    "REVISION_SCHEMA",
    "SAMPLES",
    "SCORES",
    "TASKS_SNAPSHOT",
    "BlindAnswer",
    "GraderScreen",
    "GradingError",
    "ShownAnswer",
    "collect_answers",
    "export_csv",
    "grade_session",
    "grades_as_of",
    "import_csv",
    "latest_grades",
    "rubric_rounds",
    "shuffle_answers",
]
