"""Where a trial table comes from: an experiment run directory, a Harbor job directory or an
outcomes file, told apart by what is on disk.

Apart from ``outcomes`` (the table and the run-directory reader) and ``harbor`` (the Harbor
reader, built on that table), so neither of the two imports the other to dispatch.
"""

from __future__ import annotations

from pathlib import Path

from assay.errors import InputError
from assay.report.harbor import DEFAULT_THRESHOLD, is_harbor_job, load_harbor_job
from assay.report.outcomes import OutcomeSet, load_outcomes_file, load_run_outcomes


def load_outcomes(source: Path, *, reward_threshold: float | None = None) -> OutcomeSet:
    """An experiment run directory (it has ``manifest.json``), a Harbor job directory
    (``report/harbor.py``; ``reward_threshold`` decides a pass there) or an outcomes file."""
    source = Path(source)
    if source.is_dir():
        if is_harbor_job(source):
            return load_harbor_job(source, threshold=DEFAULT_THRESHOLD
                                   if reward_threshold is None else reward_threshold)
        if not (source / "manifest.json").is_file():
            raise InputError(f"{source}: no manifest.json: not an experiment run directory "
                             "(give the directory `exp run --out` wrote, a Harbor job "
                             "directory, or an outcomes file)")
        return load_run_outcomes(source)
    if not source.is_file():
        raise InputError(f"{source}: no such file or directory")
    return load_outcomes_file(source)


# ----------------------------------------------------------------------------- outcomes file
