"""mypy on the whole package (its settings: ``[tool.mypy]`` in pyproject.toml), as a test.

``make lint`` runs mypy itself; ``make test`` runs it here, as one of the suite's parallel
units, so its half minute of CPU overlaps the tests that wait on budgets, kills and agents
instead of adding to the wall time before them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_mypy_is_clean() -> None:
    # mypy is in the dev extra that make test installs: missing, this fails rather than skips
    res = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True, timeout=590)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout, res.stdout
