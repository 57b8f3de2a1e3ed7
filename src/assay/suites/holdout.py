"""Where a holdout split's ledger lives and how many looks it allows.

The allowance is ``max_looks:`` in ``.assay/holdout.yaml`` beside the ledger, in the folder that
holds the bundles, and nowhere else. Not in the experiment file: that file is edited by the
author of the candidate, the one person who should not be able to raise the allowance in the
same change that spends it. Beside the bundles, a change to the allowance is a change to the
team's tasks, seen in the same review as a change to a task. Absent, the allowance is one look.
``--holdout-reuse`` goes past it for one run, and that run and every report after it call the
set "reused".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.records.holdout import LEDGER_DIR, ledger_path
from assay.suites.bundle import Bundle
from assay.suites.limits import HOLDOUT_FILE_MAX_BYTES
from assay.suites.textfile import read_text
from assay.suites.yamlfile import load_mapping, validation_error

POLICY_FILE = "holdout.yaml"
DEFAULT_MAX_LOOKS = 1


class HoldoutPolicy(BaseModel):
    """``.assay/holdout.yaml``, as written."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_looks: int = Field(default=DEFAULT_MAX_LOOKS, ge=1)
    """Distinct runs allowed on this holdout before ``--holdout-reuse`` is needed."""


def policy_path(folder: Path) -> Path:
    return Path(folder) / LEDGER_DIR / POLICY_FILE


def load_policy(folder: Path) -> HoldoutPolicy:
    """The folder's allowance; the default when the file is absent, a ``SuiteError`` naming
    line and field when it is wrong."""
    path = policy_path(folder)
    if not path.exists():
        return HoldoutPolicy()
    text = read_text(path, limit=HOLDOUT_FILE_MAX_BYTES, what="the holdout policy")[1]
    try:
        return HoldoutPolicy.model_validate(load_mapping(path, text))
    except ValidationError as exc:
        raise validation_error(path, text, exc, model=HoldoutPolicy) from exc


def holdout_folders(bundles: Iterable[Bundle]) -> dict[Path, list[str]]:
    """The holdout bundles' parent folders (absolute), each with the ids of its holdout tasks:
    each of these folders keeps a ledger."""
    out: dict[Path, list[str]] = {}
    for b in bundles:
        if b.spec.split == "holdout":
            out.setdefault(Path(b.root).resolve().parent, []).append(b.id)
    return {k: sorted(v) for k, v in sorted(out.items())}


def max_looks(folders: Iterable[Path]) -> int:
    """The strictest allowance among the folders (a look at several holdouts is one look at
    each of them)."""
    limits = [load_policy(f).max_looks for f in folders]
    return min(limits) if limits else DEFAULT_MAX_LOOKS


__all__ = ["HoldoutPolicy", "holdout_folders", "ledger_path", "load_policy", "max_looks",
           "policy_path"]
