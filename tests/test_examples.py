"""The examples run as a user would run them: a subprocess, from another directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_library_example_runs_compares_and_prints_the_verdict(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "library.py"), str(runs)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    base = json.loads((runs / "baseline" / "report.json").read_text())
    oracle = json.loads((runs / "oracle" / "report.json").read_text())
    assert base["n"] == oracle["n"] == 75 and oracle["accuracy"] == 1.0
    assert lines[0].startswith(f"builtin/baseline: accuracy {base['accuracy']:.1%} ")
    assert lines[0].endswith("over 75 answers, complete")
    assert lines[1].startswith("builtin/oracle: accuracy 100.0% ")
    diff = oracle["accuracy"] - base["accuracy"]
    assert lines[2].startswith(f"oracle - baseline: {diff:+.1%} (95% paired CI ")
    assert lines[3] == "verdict: oracle is better"
    assert lines[4] == f"runs in {runs}"
    for run in ("baseline", "oracle"):
        assert {"manifest.json", "raw_predictions.jsonl", "report.md", "report.html"} <= {
            p.name for p in (runs / run).iterdir()}
    assert done.stderr == ""  # the library is silent unless given a progress display
