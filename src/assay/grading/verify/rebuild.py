"""The delivered tree, rebuilt on the host from the pristine starting tree and the frozen tar.

The verifier checks this tree and the judge reads it; both rebuild it the same way, so it lives
apart from either (the judge's material must not import the verifier that runs the judge).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from assay.grading.verify.integrity import IntegrityResult
from assay.records.artifact import extract_paths


def build_workspace(pristine: Path, trial_dir: Path, integrity: IntegrityResult,
                    dest: Path) -> None:
    """Pristine tree, then the candidate's changes carried over from the frozen tar."""
    shutil.copytree(pristine, dest, symlinks=True)
    for path in sorted(integrity.changes.deleted, reverse=True):
        p = dest / path
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
    extract_paths(trial_dir, dest, set(integrity.changes.added + integrity.changes.modified))
