"""Judges from Python: load one, ask it about material, calibrate it against human grades.

    import assay.api.judge as judges

    judge = judges.load_judge("judges/helpful/judge.yaml")
    result = judges.calibrate("judges/helpful/judge.yaml", "grades/helpful.jsonl")
    print(result.record["criteria"]["correct"]["kappa"])

The endpoint comes from ``judge.yaml`` (``base_url`` or the variable ``base_url_env`` names);
the key from the variable ``api_key_env`` names, read here and handed to the client only: it is
never recorded, logged or put on a command line.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.grading.judge.calibration import (
    UNCALIBRATED,
    Calibrated,
    calibration_for,
    calibration_label,
)
from assay.grading.judge.calibration import calibrate as _calibrate
from assay.grading.judge.endpoint import judge_client
from assay.grading.judge.human import load_human_grades
from assay.grading.judge.reply import Material, judge_material
from assay.records.judgement import Judgement, append_judgement
from assay.suites.judge_spec import LoadedJudge, load_judge

__all__ = ["UNCALIBRATED", "Calibrated", "Judgement", "Material", "append_judgement",
           "calibrate", "calibration_for", "calibration_label", "judge_client", "judge_one",
           "load_judge"]



def judge_one(judge: LoadedJudge | str | Path, material: Material, *,
              subject: dict[str, Any] | None = None,
              environ: Mapping[str, str] = os.environ) -> Judgement:
    """One judgement, synchronously (the judge's async core is :func:`judge_material`)."""
    loaded = judge if isinstance(judge, LoadedJudge) else load_judge(Path(judge))

    async def go() -> Judgement:
        client = judge_client(loaded, environ=environ)
        try:
            return await judge_material(client, loaded, material, subject=subject or {})
        finally:
            await client.aclose()

    return asyncio.run(go())


def calibrate(judge: str | Path, human_grades: str | Path, *, out: str | Path | None = None,
              concurrency: int = 4, environ: Mapping[str, str] = os.environ) -> Calibrated:
    """Run the judge on every human-graded item and write ``calibration-<revision>.json``
    (in ``out``, by default beside judge.yaml)."""
    loaded = load_judge(Path(judge))
    human = load_human_grades(Path(human_grades), loaded)
    where = Path(out) if out is not None else None

    async def go() -> Calibrated:
        client = judge_client(loaded, environ=environ)
        try:
            return await _calibrate(client, loaded, human, where=where,
                                    concurrency=concurrency)
        finally:
            await client.aclose()

    return asyncio.run(go())
