"""assay from Python: the triage suite against two built-in models, then the paired verdict.

    python examples/library.py [RUNS_DIR]     # default: a temporary directory

``assay.run`` leaves the same run directory as ``assay run`` (manifest, rows, report.json, .md
and .html); its ``figures`` are the report as a record (``docs/records.md``), and
``assay.comparison`` is what ``assay compare --json`` writes, as a record too.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import assay
from assay.api.records import NarrowComparison, NarrowReport

SUITE = Path(__file__).resolve().parent / "triage"


def main(root: Path) -> None:
    runs = {}
    for model in ("builtin/baseline", "builtin/oracle"):
        result = assay.run(SUITE, model, out=root / model.removeprefix("builtin/"))
        figures = result.figures
        assert isinstance(figures, NarrowReport)  # a narrow suite: accuracy over answers
        assert figures.accuracy is not None and figures.accuracy_ci95 is not None
        lo, hi = figures.accuracy_ci95
        print(f"{model}: accuracy {figures.accuracy:.1%} (95% CI {lo:.1%} to "
              f"{hi:.1%}) over {figures.n} answers, {result.status}")
        runs[model] = result.run_dir
    c = assay.comparison(runs["builtin/baseline"], runs["builtin/oracle"])
    assert isinstance(c, NarrowComparison)  # a narrow suite: case by case
    lo, hi = c.diff_ci95
    print(f"oracle - baseline: {c.accuracy_diff_b_minus_a:+.1%} (95% paired CI {lo:+.1%} "
          f"to {hi:+.1%}; McNemar p = {c.mcnemar_p:.3g})")
    verdict = ("oracle is better" if lo > 0 else "baseline is better" if hi < 0
               else "no difference shown")
    print(f"verdict: {verdict}")
    print(f"runs in {root}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="assay-example-") as tmp:
            main(Path(tmp))
