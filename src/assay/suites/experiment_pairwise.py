"""The experiment file's ``pairwise:`` block: which judge, which two arms, what it reads.

Apart from ``suites/experiment.py`` because it is the one block that points at another file
(the judge), checked here so a judge that cannot load is refused before the first trial rather
than after the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from assay.suites.errors import Problem, SuiteError
from assay.suites.judge_spec import load_judge

#: What a pairwise judge may be shown of a candidate (``grading/judge_material.PARTS``).
PairwisePart = Literal["diff", "files", "trajectory", "answer"]


class Pairwise(BaseModel):
    """A pinned judge's preference between two arms, asked after every trial is graded (the
    same judging as ``assay judge pairwise``, into ``<run>/pairwise/``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    judge: str = Field(min_length=1)
    """The judge file (``judge.yaml``), relative to the experiment file; it must load."""
    a: str | None = None
    """Arm A; default: the bar's baseline (or the first of two arms)."""
    b: str | None = None
    """Arm B (the preference is of B over A); default: the bar's candidate (or the second of
    two arms)."""
    show: list[PairwisePart] | None = Field(default=None, min_length=1)
    """What the judge reads of each candidate; default: diff and trajectory."""
    seed: int = 0
    """Seeds the opaque candidate ids."""


def resolve_arms(pw: Pairwise, baseline: str | None, candidate: str | None,
                 arms: list[str]) -> tuple[str, str] | None:
    """Arms A and B: as named, else the bar's baseline and candidate, else the two arms in the
    file's order (as ``exp compare`` defaults); None when that names no pair."""
    default: tuple[str | None, str | None] = (
        (baseline, candidate) if baseline is not None
        else (arms[0], arms[1]) if len(arms) == 2 else (None, None))
    a, b = pw.a or default[0], pw.b or default[1]
    return (a, b) if a is not None and b is not None else None


def pairwise_judge_path(experiment_file: Path, judge: str) -> Path:
    """The judge file of a pairwise block: relative to the experiment file."""
    return Path(judge) if Path(judge).is_absolute() else Path(experiment_file).parent / judge


def check_pairwise(path: Path, pw: Pairwise, pair: tuple[str, str] | None, arms: list[str],
                   problem: Callable[[tuple[str, ...], str], Problem]) -> list[Problem]:
    """The judge must load and the two arms must exist and differ."""
    out = [problem(("pairwise", side), f"no arm {name!r} in arms")
           for side, name in (("a", pw.a), ("b", pw.b)) if name is not None and name not in arms]
    if pair is None:
        out.append(problem(("pairwise",), f"{len(arms)} arms and no bar naming baseline and "
                           "candidate: name the arms with a: and b:"))
    elif pair[0] == pair[1]:
        out.append(problem(("pairwise", "b"), f"arm {pair[1]!r} would be judged against "
                           "itself"))
    judge = pairwise_judge_path(path, pw.judge)
    if not judge.is_file():
        out.append(problem(("pairwise", "judge"), f"{judge}: no such judge file"))
    else:
        try:
            load_judge(judge)
        except SuiteError as exc:
            out.append(problem(("pairwise", "judge"), f"{judge} does not load: "
                               + "; ".join(str(p) for p in exc.problems)))
    return out


__all__ = ["Pairwise", "PairwisePart", "check_pairwise", "pairwise_judge_path", "resolve_arms"]
