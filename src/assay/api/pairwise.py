"""A pinned judge's preference between two arms, task by task (``assay judge pairwise``), and
an experiment's ``pairwise:`` check; the judging loop is in ``runner/pairwise.py``.

Both return plain JSON-ready dicts: the summary written to ``pairwise.json`` (``exp compare
--preference`` reads it back with :func:`read_preference`), or, for the experiment's check,
``{"error": why, "exit_code": 3}`` when the judging could not be done.
"""

from __future__ import annotations

from assay.runner.pairwise import (
    CHECK_DIR,
    ERROR_FILE,
    judge_pairwise,
    pairwise_check,
    plan_pairs,
    read_preference,
    summarize,
)

__all__ = ["CHECK_DIR", "ERROR_FILE", "judge_pairwise", "pairwise_check", "plan_pairs",
           "read_preference", "summarize"]
