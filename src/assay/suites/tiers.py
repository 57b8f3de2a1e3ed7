"""CI tiers: named selections of a suite's cases or an experiment's tasks (``tiers:``).

A pull request cannot afford the full evaluation, a nightly job can. A suite or an experiment
declares its tiers once (``tiers: {smoke: {select: {ids: [...]}}, full: {}}``) and
``--tier smoke`` runs only that selection, so the per-PR gate and the scheduled run are the same
file, not two copies that drift apart. A tier's run measures its own cases: their digest is the
run's cases digest, so a smoke run is never paired with, resumed as, or drawn in one series
with a full one.

For a narrow suite a tier selects ``ids`` and/or the ``first`` N cases (file order, after
``ids``). For an experiment a tier's ``select`` replaces the file's (``split``, ``families``,
``ids``) and ``repetitions`` may be lowered; every other setting is the file's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from assay.errors import SuiteError


class CaseSelect(BaseModel):
    """Which cases of a narrow suite a tier runs; every given filter must hold."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    ids: list[str] | None = Field(default=None, min_length=1)
    """Only these case ids (each must exist)."""
    first: int | None = Field(default=None, ge=1)
    """Only the first N cases (in file order, after ``ids``)."""


class SuiteTier(BaseModel):
    """One tier of a narrow suite (``suite.yaml``'s ``tiers:``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    select: CaseSelect | None = None
    """The cases; absent: every case (a ``full`` tier)."""


class _Identified(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def line(self) -> int: ...


def tier_named(tiers: dict[str, Any] | None, name: str, where: Path) -> Any:
    """The tier ``name`` of ``tiers`` (None for an empty one), or a SuiteError naming the
    tiers that exist."""
    if not tiers or name not in tiers:
        known = ", ".join(sorted(tiers or {})) or "none defined"
        raise SuiteError.one(where, f"unknown tier {name!r} ({known})", field="tiers")
    return tiers[name]


def select_cases(cases: Sequence[_Identified], tier: SuiteTier | None, name: str,
                 where: Path) -> list[Any]:
    """The cases a narrow tier runs, in file order."""
    sel = tier.select if tier is not None else None
    if sel is None:
        return list(cases)
    chosen = list(cases)
    if sel.ids is not None:
        known = {c.id for c in cases}
        missing = [i for i in sel.ids if i not in known]
        if missing:
            raise SuiteError.one(where, f"no case {missing[0]!r} in the cases"
                                 + (f" (and {len(missing) - 1} more)" if len(missing) > 1
                                    else ""), field=f"tiers.{name}.select.ids")
        wanted = set(sel.ids)
        chosen = [c for c in chosen if c.id in wanted]
    if sel.first is not None:
        chosen = chosen[: sel.first]
    return chosen


def selected_text(cases_path: Path, cases: Sequence[_Identified]) -> str:
    """The exact lines of the selected cases, in file order: what a tier's run ran (its
    digest is the run's ``cases_sha256``, and its snapshot is the run's copy of the cases)."""
    lines = cases_path.read_text(encoding="utf-8").split("\n")  # as the case reader counts
    return "".join(lines[c.line - 1] + "\n" for c in cases)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
